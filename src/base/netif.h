/* ringlet: network-interface selection (RINGLET_SOCKET_IFNAME), with the syntax of
 * NCCL's NCCL_SOCKET_IFNAME.
 *
 * Spec syntax:
 *   "eth,ib"     comma-separated list of name prefixes: select names starting with any
 *   "^docker,lo" leading '^': exclude list, select names matching none of the entries
 *   "=eth0"      leading '=': entries are exact names instead of prefixes
 *   "^=eth0,lo"  both: exclude exactly these names
 * Empty entries ("eth,,ib", trailing ',') are ignored. Nothing else is special:
 * whitespace is part of a name (" eth" does not match "eth0"), ':' too (so alias
 * labels such as "eth0:1" can be named). A NULL or "" spec means "no restriction".
 * An include list with no non-empty entry ("," or "=") selects nothing; an exclude
 * list with no entry ("^") selects everything.
 */
#ifndef RL_NETIF_H
#define RL_NETIF_H

#include <net/if.h>
#include <stddef.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rl_netif {
    char name[IF_NAMESIZE + 1];    /* interface name (or alias label) from getifaddrs */
    struct sockaddr_storage addr;  /* AF_INET or AF_INET6 address, port 0 */
    socklen_t addrlen;             /* sizeof(struct sockaddr_in) or sizeof(struct sockaddr_in6) */
    int is_loopback;               /* IFF_LOOPBACK interface or loopback address */
};

/* 1 if ifname is selected by spec, 0 if not (see syntax above). NULL or "" spec: 1.
 * NULL ifname: 0. */
int rl_netif_match(const char *spec, const char *ifname);

/* Fills out[0..max) with the addresses of interfaces that are UP and selected, and
 * returns how many (0..max), or -1 if getifaddrs fails (errno set).
 *
 * Every AF_INET address comes first, then every AF_INET6 address that is not link-local
 * (fe80::/10); within each family, in getifaddrs order. An interface with both kinds
 * of address therefore appears more than once (e.g. eth0 192.0.2.2, then eth0 fd00::2);
 * a caller that wants one address per interface keeps the first entry of each name.
 * Interfaces without an IP address (ifb, dummy, ...) never appear.
 *
 * Selection: by spec when spec is non-NULL and non-empty (loopback included if the
 * spec selects it). Otherwise the default policy: skip names starting with "docker"
 * or "lo", loopback interfaces and interfaces without a carrier (not IFF_RUNNING, unless
 * none has one); if that leaves no address, fall back to the loopback
 * interfaces' addresses (single-host runs on a machine with no other network). */
int rl_netif_list(const char *spec, struct rl_netif *out, int max);

/* Writes "name:addr" (e.g. "eth0:192.0.2.2", "eth0:fd00::2", no port) into buf for
 * logs, truncating to len. Returns buf. */
const char *rl_netif_str(const struct rl_netif *nif, char *buf, size_t len);

/* Writes "1.2.3.4:port" or "[::1]:port" ("[fe80::1%eth0]:port" with a scope id) into
 * buf. Returns 0, or -1 (buf holds "?" if len allows) when sa is NULL, its family is
 * neither AF_INET nor AF_INET6, or buf is too small. */
int rl_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* RL_NETIF_H */
