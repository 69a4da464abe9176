/* Unit test of the IB transport's port choice (transports/ib_verbs.c, rl_ib_open_port)
 * over a fake verbs table, so it runs without an RDMA device: an InfiniBand port and one
 * of an older kernel (link layer unspecified) are taken; a device that is neither
 * InfiniBand nor RoCE (AWS EFA: its queue pairs are datagrams; iWARP: no write with
 * immediate) is not, saying why (it was taken, and every connection then failed); a GID
 * index past 255 (a queue pair names its source GID in 8 bits) is refused when forced and
 * never chosen (it was cut to 8 bits: another GID); an InfiniBand port that requires a GRH
 * (an SR-IOV virtual function's) is addressed by GID 0 with one. And which GIDs can reach
 * each other (rl_ib_gid_mismatch), when queue pairs need a GRH (rl_ib_use_grh), and which
 * port a rank takes among several (rl_ib_pick_port). Exit
 * status 0 on success, 77 when built without rdma-core's headers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib_verbs.h"

#ifndef RL_HAVE_VERBS
int main(void) {
    printf("SKIP: built without rdma-core's headers\n");
    return 77;
}
#else

static struct ibv_device g_dev;
static struct ibv_device *g_list[2];
static struct ibv_context g_ctx;
static int g_link, g_tbl, g_first_valid; /* GIDs below g_first_valid read as zero (unused) */
static int g_port_flags;                  /* ibv_port_attr.flags */

static struct ibv_device **get_list(int *n) {
    g_list[0] = &g_dev;
    *n = 1;
    return g_list;
}
static void free_list(struct ibv_device **l) { (void)l; }
static const char *dev_name(struct ibv_device *d) { return (void)d, "fake0"; }
static struct ibv_context *open_dev(struct ibv_device *d) { return (void)d, &g_ctx; }
static int close_dev(struct ibv_context *c) { return (void)c, 0; }
static int query_dev(struct ibv_context *c, struct ibv_device_attr *a) {
    (void)c;
    memset(a, 0, sizeof *a);
    a->phys_port_cnt = 1;
    return 0;
}
static int query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
    (void)c, (void)port;
    a->state = IBV_PORT_ACTIVE;
    a->link_layer = (uint8_t)g_link;
    a->gid_tbl_len = g_tbl;
    a->lid = 7;
    a->flags = (uint8_t)g_port_flags;
    return 0;
}
static int query_gid(struct ibv_context *c, uint8_t port, int i, union ibv_gid *g) {
    (void)c, (void)port;
    memset(g, 0, sizeof *g);
    if (i >= g_first_valid) { /* fe80::<i> */
        g->raw[0] = 0xfe, g->raw[1] = 0x80;
        g->raw[14] = (uint8_t)(i >> 8), g->raw[15] = (uint8_t)(i | 1);
    }
    return 0;
}

static int failures;
static void one(const char *what, int transport, int link, int tbl, int first_valid, const char *forced, int want_ok,
                const char *want_in_err) {
    rl_ibv v;
    memset(&v, 0, sizeof v);
    v.get_device_list = get_list;
    v.free_device_list = free_list;
    v.get_device_name = dev_name;
    v.open_device = open_dev;
    v.close_device = close_dev;
    v.query_device = query_dev;
    v.query_port = query_port;
    v.query_gid = query_gid;
    g_dev.transport_type = (enum ibv_transport_type)transport;
    g_link = link, g_tbl = tbl, g_first_valid = first_valid;
    if (forced) setenv("RINGLET_IB_GID_INDEX", forced, 1);
    else unsetenv("RINGLET_IB_GID_INDEX");
    rl_ib_port p;
    char err[512] = "";
    int rc = rl_ib_open_port(&v, NULL, &p, err, sizeof err);
    int ok = want_ok ? rc == 0 && (!p.is_eth || (p.gid_index >= 0 && p.gid_index < 256))
                     : rc != 0 && (!want_in_err || strstr(err, want_in_err));
    /* a GRH where RoCE, a forced GID or the port asks for one; on InfiniBand then GID 0 */
    int want_grh = link == IBV_LINK_LAYER_ETHERNET || forced || (g_port_flags & 1);
    if (ok && rc == 0 && (p.grh != want_grh || (!p.is_eth && !forced && p.gid_index != (want_grh ? 0 : -1)))) {
        printf("FAIL: %s: GRH %d (want %d), GID index %d\n", what, p.grh, want_grh, p.gid_index);
        ok = 0;
    }
    printf("%s %s: %s%s\n", ok ? "ok:  " : "FAIL:", what, rc ? "refused: " : "taken", rc ? err : "");
    failures += !ok;
}

int main(void) {
    one("InfiniBand port", IBV_TRANSPORT_IB, IBV_LINK_LAYER_INFINIBAND, 1, 0, NULL, 1, NULL);
    one("InfiniBand port, link layer unspecified (an older kernel)", IBV_TRANSPORT_IB, IBV_LINK_LAYER_UNSPECIFIED, 1, 0,
        NULL, 1, NULL);
    one("RoCE port", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, 4, 0, NULL, 1, NULL);
    one("a device neither InfiniBand nor RoCE (EFA)", IBV_TRANSPORT_UNSPECIFIED, IBV_LINK_LAYER_UNSPECIFIED, 1, 0, NULL,
        0, "not InfiniBand or RoCE");
    one("an iWARP device", IBV_TRANSPORT_IWARP, IBV_LINK_LAYER_ETHERNET, 4, 0, NULL, 0, "not InfiniBand or RoCE");
    one("RoCE, RINGLET_IB_GID_INDEX=300 of 1024", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, 1024, 0, "300", 0, "0..255");
    one("RoCE, the only usable GIDs past 255", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, 1024, 256, NULL, 0,
        "no usable GID");
    one("RoCE, usable GIDs from 200 of 1024", IBV_TRANSPORT_IB, IBV_LINK_LAYER_ETHERNET, 1024, 200, NULL, 1, NULL);
    g_port_flags = 1; /* IBV_QPF_GRH_REQUIRED: an SR-IOV virtual function's port */
    one("InfiniBand port that requires a GRH", IBV_TRANSPORT_IB, IBV_LINK_LAYER_INFINIBAND, 1, 0, NULL, 1, NULL);
    g_port_flags = 0;
    one("InfiniBand port, RINGLET_IB_GID_INDEX=0", IBV_TRANSPORT_IB, IBV_LINK_LAYER_INFINIBAND, 1, 0, "0", 1, NULL);

    /* Which GIDs can reach each other, and when a GRH is needed. */
    uint8_t v4a[16] = {[10] = 0xff, [11] = 0xff, [12] = 10, [15] = 1}, v4b[16] = {[10] = 0xff, [11] = 0xff, [12] = 10, [15] = 2};
    uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}, ll[16] = {0xfe, 0x80, [15] = 3};
    uint8_t ib1[16] = {0xfe, 0x80, [8] = 1, [15] = 1}, ib2[16] = {0xfe, 0x80, [8] = 2, [15] = 2};
    uint8_t sub2[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 1, [8] = 2, [15] = 2}, zero[16] = {0};
    struct {
        const char *what;
        int got, want;
    } t[] = {
        {"v2 IPv4 / v2 IPv4", rl_ib_gid_mismatch(RL_GID_ROCE_V2, v4a, RL_GID_ROCE_V2, v4b) == NULL, 1},
        {"v2 IPv4 / v2 IPv6: refused", rl_ib_gid_mismatch(RL_GID_ROCE_V2, v4a, RL_GID_ROCE_V2, v6) != NULL, 1},
        {"v2 link-local / v2 IPv4: refused", rl_ib_gid_mismatch(RL_GID_ROCE_V2, ll, RL_GID_ROCE_V2, v4b) != NULL, 1},
        {"v1 / v2: refused", rl_ib_gid_mismatch(RL_GID_ROCE_V1, v4a, RL_GID_ROCE_V2, v4b) != NULL, 1},
        {"v1 IPv4 / v1 IPv6", rl_ib_gid_mismatch(RL_GID_ROCE_V1, v4a, RL_GID_ROCE_V1, v6) == NULL, 1},
        {"unknown type / v2 IPv6", rl_ib_gid_mismatch(RL_GID_UNKNOWN, v4a, RL_GID_ROCE_V2, v6) == NULL, 1},
        {"IB / IB", rl_ib_gid_mismatch(RL_GID_IB, ib1, RL_GID_IB, ib2) == NULL, 1},
        {"GRH: one subnet, neither asks", rl_ib_use_grh(0, ib1, 0, ib2), 0},
        {"GRH: the peer asks", rl_ib_use_grh(0, ib1, 1, ib2), 1},
        {"GRH: this side asks", rl_ib_use_grh(1, ib1, 0, ib2), 1},
        {"GRH: other subnets", rl_ib_use_grh(0, ib1, 0, sub2), 1},
        {"GRH: a prefix unknown", rl_ib_use_grh(0, zero, 0, sub2), 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int ok = t[i].got == t[i].want;
        printf("%s %s\n", ok ? "ok:  " : "FAIL:", t[i].what);
        failures += !ok;
    }

    /* Which port a host's ranks take (rl_ib_pick_port): InfiniBand before RoCE (a host's
     * front-end ConnectX holding the bootstrap address took every rank's traffic beside 4
     * InfiniBand NICs), the first of the largest group of ports alike (a slower card listed
     * first left out); but the RoCE port of the bootstrap address before a lone InfiniBand
     * card (storage beside a RoCE compute network). */
    rl_ib_port c[6];
    int sc[6];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 6; i++) {
        c[i].is_eth = i == 0;         /* 0: RoCE, front end, holding the bootstrap address */
        c[i].attr.active_width = 2;   /* 4x */
        c[i].attr.active_speed = 128; /* NDR */
        sc[i] = i == 0 ? 2 : 1;
    }
    c[1].attr.active_speed = 32; /* 1: a slower InfiniBand card (EDR), listed first */
    /* each call in its own statement: an initialiser list's order of evaluation is unspecified */
    int alike = 0, got, p_all = rl_ib_pick_port(c, sc, 6, &alike), n_all = alike;
    int p_lone = rl_ib_pick_port(c, sc, 2, &alike);
    sc[0] = 1; /* the RoCE port no longer holds the bootstrap address */
    int p_lone2 = rl_ib_pick_port(c, sc, 2, &alike);
    int p_roce = rl_ib_pick_port(c, sc, 1, &alike);
    int p_none = rl_ib_pick_port(c, sc, 0, &alike);
    struct {
        const char *what;
        int got, want;
    } pk[] = {
        {"pick: InfiniBand NDR (4 alike) before the RoCE port of the bootstrap address and the EDR card", p_all, 2},
        {"pick: the group of 4 counted", n_all, 4},
        {"pick: a lone InfiniBand card: the RoCE port of the bootstrap address", p_lone, 0},
        {"pick: a lone InfiniBand card beside a RoCE port without it: InfiniBand", p_lone2, 1},
        {"pick: RoCE alone", p_roce, 0},
        {"pick: none", p_none, -1},
    };
    for (size_t i = 0; i < sizeof pk / sizeof pk[0]; i++) {
        int ok = pk[i].got == pk[i].want;
        printf("%s %s (%d)\n", ok ? "ok:  " : "FAIL:", pk[i].what, pk[i].got);
        failures += !ok;
    }
    /* RoCE ports only: the bootstrap address's, wherever it is listed */
    rl_ib_port r[3];
    int rs[3] = {1, 2, 1};
    memset(r, 0, sizeof r);
    for (int i = 0; i < 3; i++) r[i].is_eth = 1;
    got = rl_ib_pick_port(r, rs, 3, &alike);
    printf("%s pick: RoCE ports only, the second holds the bootstrap address (%d)\n", got == 1 ? "ok:  " : "FAIL:", got);
    failures += got != 1;
    if (failures) return 1;
    printf("test_ib_port: ok\n");
    return 0;
}
#endif
