/* ringlet: network-interface selection (see netif.h for the spec syntax). */
#include "netif.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

int rl_netif_match(const char *spec, const char *ifname)
{
    if (ifname == NULL)
        return 0;
    if (spec == NULL || spec[0] == '\0')
        return 1;

    int exclude = 0, exact = 0;
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }

    size_t namelen = strlen(ifname);
    int hit = 0;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n > 0) {
            int m = exact ? (namelen == n && memcmp(ifname, p, n) == 0)
                          : (namelen >= n && memcmp(ifname, p, n) == 0);
            if (m) {
                hit = 1;
                break;
            }
        }
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return exclude ? !hit : hit;
}

enum select_mode {
    SELECT_SPEC,    /* by the user's spec */
    SELECT_DEFAULT, /* not docker*, not lo*, not loopback, with a carrier (IFF_RUNNING) */
    SELECT_DEFAULT_ANY, /* the same without a carrier (when none has one) */
    SELECT_LOOP     /* loopback only (fallback of the default policy) */
};

static int is_loopback_addr(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
    }
    return 0;
}

static int ifa_is_loopback(const struct ifaddrs *ifa)
{
    return (ifa->ifa_flags & IFF_LOOPBACK) != 0 || is_loopback_addr(ifa->ifa_addr);
}

static int selected(const struct ifaddrs *ifa, const char *spec, enum select_mode mode)
{
    switch (mode) {
    case SELECT_SPEC:
        return rl_netif_match(spec, ifa->ifa_name);
    case SELECT_DEFAULT:
        /* up but without a carrier (a cable out, a veth whose peer is down): its address
         * reaches nobody, and a rank that published it waited for connections until the
         * deadline; RINGLET_SOCKET_IFNAME still takes any interface it names */
        if (!(ifa->ifa_flags & IFF_RUNNING))
            return 0;
        return !ifa_is_loopback(ifa) && rl_netif_match("^docker,lo", ifa->ifa_name);
    case SELECT_DEFAULT_ANY:
        return !ifa_is_loopback(ifa) && rl_netif_match("^docker,lo", ifa->ifa_name);
    case SELECT_LOOP:
        return ifa_is_loopback(ifa);
    }
    return 0;
}

/* One pass over the list for one family; appends to out[*n..max). */
static void collect(struct ifaddrs *list, int family, const char *spec, enum select_mode mode,
                    struct rl_netif *out, int max, int *n)
{
    for (struct ifaddrs *ifa = list; ifa != NULL && *n < max; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || ifa->ifa_name == NULL)
            continue;
        if (ifa->ifa_addr->sa_family != family)
            continue;
        if (!(ifa->ifa_flags & IFF_UP))
            continue;
        if (family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)ifa->ifa_addr;
            if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr))
                continue;
        }
        if (!selected(ifa, spec, mode))
            continue;

        struct rl_netif *nif = &out[*n];
        memset(nif, 0, sizeof *nif);
        snprintf(nif->name, sizeof nif->name, "%s", ifa->ifa_name);
        if (family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)(void *)&nif->addr;
            memcpy(in, ifa->ifa_addr, sizeof *in);
            in->sin_port = 0;
            nif->addrlen = (socklen_t)sizeof *in;
        } else {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)(void *)&nif->addr;
            memcpy(in6, ifa->ifa_addr, sizeof *in6);
            in6->sin6_port = 0;
            nif->addrlen = (socklen_t)sizeof *in6;
        }
        nif->is_loopback = ifa_is_loopback(ifa);
        (*n)++;
    }
}

static int list_mode(struct ifaddrs *list, const char *spec, enum select_mode mode, struct rl_netif *out, int max)
{
    int n = 0;
    collect(list, AF_INET, spec, mode, out, max, &n);
    collect(list, AF_INET6, spec, mode, out, max, &n);
    return n;
}

int rl_netif_list(const char *spec, struct rl_netif *out, int max)
{
    if (out == NULL || max <= 0)
        return 0;
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return -1;

    int n;
    if (spec != NULL && spec[0] != '\0') {
        n = list_mode(list, spec, SELECT_SPEC, out, max);
    } else {
        n = list_mode(list, NULL, SELECT_DEFAULT, out, max);
        if (n == 0) /* a system that never says IFF_RUNNING: better than loopback */
            n = list_mode(list, NULL, SELECT_DEFAULT_ANY, out, max);
        if (n == 0)
            n = list_mode(list, NULL, SELECT_LOOP, out, max);
    }
    freeifaddrs(list);
    return n;
}

/* Address without port into buf; 0 on success, -1 on unknown family or short buffer. */
static int addr_ntop(const struct sockaddr *sa, char *buf, size_t len)
{
    const void *src;
    if (sa->sa_family == AF_INET)
        src = &((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    else if (sa->sa_family == AF_INET6)
        src = &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    else
        return -1;
    if (len > (size_t)INET6_ADDRSTRLEN + 64)
        len = (size_t)INET6_ADDRSTRLEN + 64; /* inet_ntop takes a socklen_t */
    return inet_ntop(sa->sa_family, src, buf, (socklen_t)len) ? 0 : -1;
}

int rl_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    int w;
    if (buf == NULL || len == 0)
        return -1;
    if (sa == NULL || addr_ntop(sa, host, sizeof host) != 0)
        goto fail;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        w = snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        unsigned port = ntohs(in6->sin6_port);
        if (in6->sin6_scope_id != 0) {
            char ifn[IF_NAMESIZE];
            if (if_indextoname(in6->sin6_scope_id, ifn) != NULL)
                w = snprintf(buf, len, "[%s%%%s]:%u", host, ifn, port);
            else
                w = snprintf(buf, len, "[%s%%%u]:%u", host, (unsigned)in6->sin6_scope_id, port);
        } else {
            w = snprintf(buf, len, "[%s]:%u", host, port);
        }
    }
    if (w < 0 || (size_t)w >= len)
        goto fail;
    return 0;
fail:
    snprintf(buf, len, "?");
    return -1;
}

const char *rl_netif_str(const struct rl_netif *nif, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];
    if (buf == NULL || len == 0)
        return buf;
    if (nif == NULL) {
        snprintf(buf, len, "(null)");
        return buf;
    }
    if (addr_ntop((const struct sockaddr *)(const void *)&nif->addr, host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    snprintf(buf, len, "%s:%s", nif->name, host);
    return buf;
}
