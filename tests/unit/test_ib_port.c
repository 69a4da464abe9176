/* Unit test of the IB transport's port choice (transports/ib_verbs.c, rl_ib_open_port)
 * over a fake verbs table, so it runs without an RDMA device: an InfiniBand port and one
 * of an older kernel (link layer unspecified) are taken; a device that is neither
 * InfiniBand nor RoCE (AWS EFA: its queue pairs are datagrams; iWARP: no write with
 * immediate) is not, saying why (it was taken, and every connection then failed); a GID
 * index past 255 (a queue pair names its source GID in 8 bits) is refused when forced and
 * never chosen (it was cut to 8 bits: another GID). Exit status 0 on success, 77 when built
 * without rdma-core's headers. */
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
    if (failures) return 1;
    printf("test_ib_port: ok\n");
    return 0;
}
#endif
