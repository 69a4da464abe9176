/* Unit test for src/base/netif.c: the RINGLET_SOCKET_IFNAME matcher on a table of cases,
 * and interface listing on this machine (lo with 127.0.0.1; eth0 expected to carry
 * 192.0.2.2 in the test environment; if eth0 is absent, the default-policy checks
 * that need it are skipped with a note), and, as root in a network namespace of its own,
 * an interface without a carrier left out of the default policy's list. Exit status 0
 * on success; each failure is printed. */
#include "netif.h"

#include <arpa/inet.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static int failures;

static void check(const char *what, int cond)
{
    if (!cond) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

static const struct {
    const char *spec;
    const char *name;
    int want;
} match_cases[] = {
    /* no restriction */
    {NULL, "eth0", 1},
    {"", "eth0", 1},
    {"", "lo", 1},
    /* prefix include */
    {"eth", "eth0", 1},
    {"eth", "eth", 1},
    {"eth", "et", 0},
    {"eth", "veth0", 0},
    {"eth0", "eth0", 1},
    {"eth0", "eth01", 1},
    {"eth0", "eth1", 0},
    {"lo", "lo", 1},
    {"lo", "lo0", 1},
    {"ib", "eth0", 0},
    /* several entries */
    {"eth,ib", "eth0", 1},
    {"eth,ib", "ib0", 1},
    {"eth,ib", "ibp1s0", 1},
    {"eth,ib", "lo", 0},
    {"eth,ib,enp", "enp3s0f0", 1},
    /* empty entries are ignored */
    {"eth,,ib", "ib0", 1},
    {",eth", "eth0", 1},
    {"eth,", "eth0", 1},
    {"eth,", "lo", 0},
    {",", "eth0", 0},
    {",,", "lo", 0},
    /* exclude (prefix) */
    {"^docker,lo", "eth0", 1},
    {"^docker,lo", "docker0", 0},
    {"^docker,lo", "lo", 0},
    {"^docker,lo", "loop1", 0},
    {"^docker,lo", "dock", 1},
    {"^lo", "eth0", 1},
    {"^lo", "lo", 0},
    {"^", "eth0", 1},
    {"^,", "lo", 1},
    {"^eth,,ib", "ib0", 0},
    /* exact include */
    {"=eth0", "eth0", 1},
    {"=eth0", "eth01", 0},
    {"=eth0", "eth", 0},
    {"=eth0,ib0", "ib0", 1},
    {"=eth0,ib0", "ib1", 0},
    {"=lo", "lo", 1},
    {"=lo", "lo0", 0},
    {"=", "eth0", 0},
    {"=,eth0,", "eth0", 1},
    /* exact exclude */
    {"^=eth0", "eth0", 0},
    {"^=eth0", "eth01", 1},
    {"^=eth0", "eth1", 1},
    {"^=docker0,lo", "docker0", 0},
    {"^=docker0,lo", "docker1", 1},
    {"^=docker0,lo", "lo", 0},
    {"^=docker0,lo", "lo0", 1},
    {"^=", "eth0", 1},
    /* order of the markers: '=' then '^' is an exact include of the name "^eth0" */
    {"=^eth0", "eth0", 0},
    {"=^eth0", "^eth0", 1},
    /* whitespace is not special */
    {" eth", "eth0", 0},
    {"eth ", "eth0", 0},
    {"eth, ib", "ib0", 0},
    {"eth, ib", " ib0", 1},
    {"^ eth", "eth0", 1},
    {"= eth0", "eth0", 0},
    /* ':' is part of a name (alias labels) */
    {"=eth0:1", "eth0:1", 1},
    {"=eth0:1", "eth0", 0},
    {"eth0", "eth0:1", 1},
    /* NULL name */
    {"eth", NULL, 0},
    {NULL, NULL, 0},
};

static void test_match(void)
{
    for (size_t i = 0; i < sizeof match_cases / sizeof match_cases[0]; i++) {
        int got = rl_netif_match(match_cases[i].spec, match_cases[i].name);
        if (got != match_cases[i].want) {
            printf("FAIL rl_netif_match(%s%s%s, %s%s%s) = %d, want %d\n", match_cases[i].spec ? "\"" : "",
                   match_cases[i].spec ? match_cases[i].spec : "NULL", match_cases[i].spec ? "\"" : "",
                   match_cases[i].name ? "\"" : "", match_cases[i].name ? match_cases[i].name : "NULL",
                   match_cases[i].name ? "\"" : "", got, match_cases[i].want);
            failures++;
        }
    }
}

#define MAXIF 64

static int has_addr(const struct rl_netif *l, int n, const char *name, const char *addr)
{
    char buf[128];
    for (int i = 0; i < n; i++) {
        if (name && strcmp(l[i].name, name) != 0)
            continue;
        rl_netif_str(&l[i], buf, sizeof buf);
        const char *colon = strchr(buf, ':');
        if (colon && strcmp(colon + 1, addr) == 0)
            return 1;
    }
    return 0;
}

static int any_loopback(const struct rl_netif *l, int n)
{
    for (int i = 0; i < n; i++)
        if (l[i].is_loopback || strncmp(l[i].name, "lo", 2) == 0)
            return 1;
    return 0;
}

/* Structural checks that hold for every list: IPv4 before IPv6, no link-local IPv6,
 * addrlen consistent with the family, port 0. */
static void check_list_shape(const char *what, const struct rl_netif *l, int n)
{
    int seen6 = 0;
    char msg[160];
    for (int i = 0; i < n; i++) {
        int fam = l[i].addr.ss_family;
        if (fam == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)&l[i].addr;
            if (seen6 || l[i].addrlen != sizeof(struct sockaddr_in) || in->sin_port != 0) {
                snprintf(msg, sizeof msg, "%s: entry %d (IPv4) misplaced or malformed", what, i);
                check(msg, 0);
            }
        } else if (fam == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)&l[i].addr;
            seen6 = 1;
            if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) || l[i].addrlen != sizeof(struct sockaddr_in6) ||
                in6->sin6_port != 0) {
                snprintf(msg, sizeof msg, "%s: entry %d (IPv6) link-local or malformed", what, i);
                check(msg, 0);
            }
        } else {
            snprintf(msg, sizeof msg, "%s: entry %d has family %d", what, i, fam);
            check(msg, 0);
        }
    }
}

static void print_list(const char *what, const struct rl_netif *l, int n)
{
    char buf[128];
    printf("  %s -> %d:", what, n);
    for (int i = 0; i < n; i++)
        printf(" %s%s", rl_netif_str(&l[i], buf, sizeof buf), l[i].is_loopback ? "(lo)" : "");
    printf("\n");
}

static void test_list(void)
{
    struct rl_netif l[MAXIF];
    int n;

    /* "lo": prefix include of loopback */
    n = rl_netif_list("lo", l, MAXIF);
    print_list("\"lo\"", l, n);
    check("list lo: count > 0", n > 0);
    check("list lo: 127.0.0.1 present", has_addr(l, n, "lo", "127.0.0.1"));
    check("list lo: first is 127.0.0.1", n > 0 && has_addr(l, 1, "lo", "127.0.0.1"));
    for (int i = 0; i < n; i++)
        check("list lo: every entry named lo* and loopback", strncmp(l[i].name, "lo", 2) == 0 && l[i].is_loopback);
    check_list_shape("list lo", l, n);

    /* "=lo": exact */
    n = rl_netif_list("=lo", l, MAXIF);
    print_list("\"=lo\"", l, n);
    check("list =lo: 127.0.0.1 present", has_addr(l, n, "lo", "127.0.0.1"));
    for (int i = 0; i < n; i++)
        check("list =lo: every entry named exactly lo", strcmp(l[i].name, "lo") == 0);
    check_list_shape("list =lo", l, n);

    /* "^lo": no loopback */
    n = rl_netif_list("^lo", l, MAXIF);
    print_list("\"^lo\"", l, n);
    check("list ^lo: no loopback", !any_loopback(l, n));
    check("list ^lo: no 127.0.0.1", !has_addr(l, n, NULL, "127.0.0.1"));
    check_list_shape("list ^lo", l, n);

    /* spec matching nothing */
    n = rl_netif_list("no_such_if_xyz", l, MAXIF);
    check("list no_such_if_xyz: 0", n == 0);
    n = rl_netif_list("=eth", l, MAXIF);
    check("list =eth: 0 (exact, no interface named eth)", n == 0);
    n = rl_netif_list(",", l, MAXIF);
    check("list \",\": 0", n == 0);

    /* max bounds the result; bad arguments give 0 */
    n = rl_netif_list("lo", l, 1);
    check("list lo max 1: exactly 1", n == 1);
    check("list lo max 1: 127.0.0.1", n == 1 && has_addr(l, 1, "lo", "127.0.0.1"));
    check("list max 0: 0", rl_netif_list("lo", l, 0) == 0);
    check("list out NULL: 0", rl_netif_list("lo", NULL, MAXIF) == 0);

    /* default policy: eth0 (192.0.2.2) and not lo */
    struct rl_netif e[MAXIF];
    int ne = rl_netif_list("=eth0", e, MAXIF);
    int have_eth0 = ne > 0 && has_addr(e, ne, "eth0", "192.0.2.2");
    const char *policies[] = {NULL, ""};
    for (int p = 0; p < 2; p++) {
        char what[64];
        snprintf(what, sizeof what, "default (%s)", policies[p] ? "\"\"" : "NULL");
        n = rl_netif_list(policies[p], l, MAXIF);
        print_list(what, l, n);
        check("default: count > 0", n > 0);
        check_list_shape(what, l, n);
        if (have_eth0) {
            check("default: eth0 192.0.2.2 present", has_addr(l, n, "eth0", "192.0.2.2"));
            check("default: first entry is eth0 192.0.2.2", n > 0 && has_addr(l, 1, "eth0", "192.0.2.2"));
            check("default: no loopback", !any_loopback(l, n));
            for (int i = 0; i < n; i++)
                check("default: no docker*", strncmp(l[i].name, "docker", 6) != 0);
        } else if (p == 0) {
            printf("  note: no eth0 with 192.0.2.2 here; eth0-specific default-policy checks skipped\n");
        }
    }
}

static void test_str(void)
{
    char buf[128];
    struct sockaddr_in in;
    memset(&in, 0, sizeof in);
    in.sin_family = AF_INET;
    in.sin_port = htons(29500);
    inet_pton(AF_INET, "1.2.3.4", &in.sin_addr);
    check("sockaddr_str v4 rc", rl_sockaddr_str((struct sockaddr *)&in, buf, sizeof buf) == 0);
    check("sockaddr_str v4 text", strcmp(buf, "1.2.3.4:29500") == 0);

    struct sockaddr_in6 in6;
    memset(&in6, 0, sizeof in6);
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(1234);
    inet_pton(AF_INET6, "::1", &in6.sin6_addr);
    check("sockaddr_str v6 rc", rl_sockaddr_str((struct sockaddr *)&in6, buf, sizeof buf) == 0);
    check("sockaddr_str v6 text", strcmp(buf, "[::1]:1234") == 0);

    char small[8];
    check("sockaddr_str short buffer", rl_sockaddr_str((struct sockaddr *)&in, small, sizeof small) == -1);
    check("sockaddr_str short buffer text", strcmp(small, "?") == 0);
    check("sockaddr_str NULL", rl_sockaddr_str(NULL, buf, sizeof buf) == -1);
    struct sockaddr un;
    memset(&un, 0, sizeof un);
    un.sa_family = AF_UNIX;
    check("sockaddr_str AF_UNIX", rl_sockaddr_str(&un, buf, sizeof buf) == -1);

    struct rl_netif nif;
    memset(&nif, 0, sizeof nif);
    snprintf(nif.name, sizeof nif.name, "eth0");
    memcpy(&nif.addr, &in, sizeof in);
    nif.addrlen = sizeof in;
    check("netif_str v4", strcmp(rl_netif_str(&nif, buf, sizeof buf), "eth0:1.2.3.4") == 0);
    memcpy(&nif.addr, &in6, sizeof in6);
    nif.addrlen = sizeof in6;
    check("netif_str v6", strcmp(rl_netif_str(&nif, buf, sizeof buf), "eth0:::1") == 0);
    check("netif_str truncates", strcmp(rl_netif_str(&nif, small, 4), "eth") == 0);
}

/* In a network namespace of its own (root only; else skipped, saying so): "aa", up with
 * 192.168.77.1 but without a carrier (a veth whose peer is down), made before "vb", a
 * dummy interface with 10.9.0.2. The default policy must list vb's address and not aa's:
 * a rank that published aa's waited for connections until its deadline. */
static void test_no_carrier(void)
{
    if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0) {
        printf("skip: no-carrier case (needs root and a network namespace)\n");
        return;
    }
    if (system("ip link add aa type veth peer name aa-peer && ip addr add 192.168.77.1/24 dev aa && "
               "ip link set aa up && ip link add vb type veth peer name vb-peer && ip addr add 10.9.0.2/24 dev vb && "
               "ip link set vb up && ip link set vb-peer up") != 0) {
        printf("skip: no-carrier case (ip could not make the interfaces)\n");
        return;
    }
    struct rl_netif l[MAXIF];
    int n = 0;
    /* the kernel marks vb running once its peer is up, perhaps a moment later: waited for
     * (at most 5 s), by construction rather than for a set time */
    for (int i = 0; i < 500; i++) {
        n = rl_netif_list(NULL, l, MAXIF);
        if (has_addr(l, n, "vb", "10.9.0.2")) break;
        usleep(10000);
    }
    print_list("default, aa without a carrier", l, n);
    check("no carrier: vb's 10.9.0.2 listed first", n > 0 && has_addr(l, 1, "vb", "10.9.0.2"));
    check("no carrier: aa's 192.168.77.1 not listed", !has_addr(l, n, "aa", "192.168.77.1"));
    n = rl_netif_list("=aa", l, MAXIF);
    check("no carrier: RINGLET_SOCKET_IFNAME=aa still lists it", has_addr(l, n, "aa", "192.168.77.1"));
}

int main(void)
{
    test_match();
    test_list();
    test_str();
    test_no_carrier(); /* last: it moves this process into a namespace of its own */
    if (failures) {
        printf("test_netif: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_netif: ok\n");
    return 0;
}
