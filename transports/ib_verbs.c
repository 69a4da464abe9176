/* libibverbs loaded at run time, and device / port / GID selection (see ib_verbs.h). */
#include "ib_verbs.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* ---- RINGLET_IB_HCA ---- */

/* Does entry [e, e + n) ("name" or "name:port") cover (dev, port)? */
static int entry_match(const char *e, size_t n, int exact, const char *dev, int port) {
    size_t namelen = n;
    int eport = -1;
    for (size_t i = 0; i < n; i++)
        if (e[i] == ':') {
            namelen = i;
            eport = 0;
            for (size_t j = i + 1; j < n; j++) {
                if (!isdigit((unsigned char)e[j])) return 0; /* a malformed port matches nothing */
                eport = eport * 10 + (e[j] - '0');
                if (eport > 65535) return 0;
            }
            if (i + 1 == n) eport = -1; /* "mlx5_0:" = every port */
            break;
        }
    if (namelen == 0) return 0;
    if (exact ? (strlen(dev) != namelen || strncmp(dev, e, namelen) != 0) : strncmp(dev, e, namelen) != 0) return 0;
    return eport < 0 || eport == port;
}

int rl_ib_hca_match(const char *spec, const char *dev, int port) {
    if (!dev) return 0;
    if (!spec || !*spec) return 1;
    int exclude = 0, exact = 0;
    if (*spec == '^') exclude = 1, spec++;
    if (*spec == '=') exact = 1, spec++;
    int hit = 0;
    while (*spec && !hit) {
        const char *end = strchr(spec, ',');
        size_t n = end ? (size_t)(end - spec) : strlen(spec);
        if (n) hit = entry_match(spec, n, exact, dev, port);
        spec += n;
        if (*spec == ',') spec++;
    }
    return exclude ? !hit : hit;
}

#ifdef RL_HAVE_VERBS

static rl_ibv g_ibv;
static int g_ibv_ok;
static char g_ibv_err[512];
static pthread_once_t g_ibv_once = PTHREAD_ONCE_INIT;

static char g_fork_state[160] = "unknown";

/* fork() after memory was registered: where the kernel does not copy pages under DMA into
 * the child (before Linux 5.13), the parent's first write to such a page after a fork (a
 * DataLoader starting its workers) moves the parent to a copy the NIC never sees: sends of
 * stale data, receives lost, silently. ibv_fork_init (before any registration: here, at
 * load) makes registrations MADV_DONTFORK instead, as NCCL and UCX do; ringlet's own
 * registered buffers are whole pages, so a child loses no other data with them. */
static void fork_protect(void) {
    enum { FORK_DISABLED = 0, FORK_ENABLED = 1, FORK_UNNEEDED = 2 }; /* enum ibv_fork_status */
    int st = g_ibv.is_fork_initialized ? g_ibv.is_fork_initialized() : -1;
    if (st == FORK_UNNEEDED) {
        snprintf(g_fork_state, sizeof g_fork_state, "unneeded (the kernel copies registered pages at fork)");
        return;
    }
    if (st == FORK_ENABLED) {
        snprintf(g_fork_state, sizeof g_fork_state, "on (enabled before ringlet: RDMAV_FORK_SAFE or the program)");
        return;
    }
    if (!g_ibv.fork_init) {
        snprintf(g_fork_state, sizeof g_fork_state, "off (this libibverbs has no ibv_fork_init): do not fork after init");
        return;
    }
    int e = g_ibv.fork_init();
    if (e == 0) snprintf(g_fork_state, sizeof g_fork_state, "on (ibv_fork_init)");
    else
        snprintf(g_fork_state, sizeof g_fork_state,
                 "off (ibv_fork_init: %s; memory was registered before ringlet loaded verbs?): do not fork after init",
                 strerror(e > 0 ? e : errno));
}

const char *rl_ib_fork_state(void) { return g_fork_state; }

static void ibv_load_once(void) {
    const char *dir = getenv("RINGLET_IB_LIBDIR");
    if (dir && *dir) snprintf(g_ibv.path, sizeof g_ibv.path, "%s/libibverbs.so.1", dir);
    else snprintf(g_ibv.path, sizeof g_ibv.path, "libibverbs.so.1");
    void *h = dlopen(g_ibv.path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(g_ibv_err, sizeof g_ibv_err, "cannot load %.200s (%.200s); install rdma-core's libibverbs1 to use IB/RoCE",
                 g_ibv.path, e ? e : "dlopen failed");
        return;
    }
    /* Required symbols, then optional ones. */
    struct {
        void **slot;
        const char *name;
        int required;
    } syms[] = {
        {(void **)&g_ibv.get_device_list, "ibv_get_device_list", 1},
        {(void **)&g_ibv.free_device_list, "ibv_free_device_list", 1},
        {(void **)&g_ibv.get_device_name, "ibv_get_device_name", 1},
        {(void **)&g_ibv.open_device, "ibv_open_device", 1},
        {(void **)&g_ibv.close_device, "ibv_close_device", 1},
        {(void **)&g_ibv.query_device, "ibv_query_device", 1},
        {(void **)&g_ibv.query_port, "ibv_query_port", 1},
        {(void **)&g_ibv.query_gid, "ibv_query_gid", 1},
        {(void **)&g_ibv.alloc_pd, "ibv_alloc_pd", 1},
        {(void **)&g_ibv.dealloc_pd, "ibv_dealloc_pd", 1},
        {(void **)&g_ibv.reg_mr, "ibv_reg_mr", 1},
        {(void **)&g_ibv.dereg_mr, "ibv_dereg_mr", 1},
        {(void **)&g_ibv.create_comp_channel, "ibv_create_comp_channel", 1},
        {(void **)&g_ibv.destroy_comp_channel, "ibv_destroy_comp_channel", 1},
        {(void **)&g_ibv.create_cq, "ibv_create_cq", 1},
        {(void **)&g_ibv.destroy_cq, "ibv_destroy_cq", 1},
        {(void **)&g_ibv.get_cq_event, "ibv_get_cq_event", 1},
        {(void **)&g_ibv.ack_cq_events, "ibv_ack_cq_events", 1},
        {(void **)&g_ibv.create_qp, "ibv_create_qp", 1},
        {(void **)&g_ibv.modify_qp, "ibv_modify_qp", 1},
        {(void **)&g_ibv.destroy_qp, "ibv_destroy_qp", 1},
        {(void **)&g_ibv.get_async_event, "ibv_get_async_event", 1},
        {(void **)&g_ibv.ack_async_event, "ibv_ack_async_event", 1},
        {(void **)&g_ibv.wc_status_str, "ibv_wc_status_str", 1},
        {(void **)&g_ibv.event_type_str, "ibv_event_type_str", 1},
        {(void **)&g_ibv.query_gid_ex, "_ibv_query_gid_ex", 0},
        {(void **)&g_ibv.reg_dmabuf_mr, "ibv_reg_dmabuf_mr", 0},
        {(void **)&g_ibv.fork_init, "ibv_fork_init", 0},
        {(void **)&g_ibv.is_fork_initialized, "ibv_is_fork_initialized", 0},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(h, syms[i].name);
        if (!p && syms[i].required) {
            snprintf(g_ibv_err, sizeof g_ibv_err, "%.300s has no %.100s (rdma-core too old?)", g_ibv.path, syms[i].name);
            dlclose(h);
            return;
        }
        /* POSIX: a function pointer travels through void * (dlsym's contract). */
        memcpy(syms[i].slot, &p, sizeof p);
    }
    fork_protect();
    g_ibv_ok = 1;
}

const rl_ibv *rl_ibv_load(char *err, size_t errlen) {
    const char *var;
    const char *off = rl_env_get("RINGLET_IB_DISABLE", &var);
    if (off && *off && strcmp(off, "0") != 0) {
        snprintf(err, errlen, "disabled by %s=%s", var, off);
        return NULL;
    }
    pthread_once(&g_ibv_once, ibv_load_once);
    if (!g_ibv_ok) {
        snprintf(err, errlen, "%s", g_ibv_err);
        return NULL;
    }
    return &g_ibv;
}

int rl_ib_dmabuf_available(void) { return g_ibv_ok && g_ibv.reg_dmabuf_mr != NULL; }

int rl_ib_peermem_loaded(void) {
    return access("/sys/module/nvidia_peermem", F_OK) == 0 || access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0;
}

#ifndef IBV_QPF_GRH_REQUIRED /* rdma-core before v20 */
#define IBV_QPF_GRH_REQUIRED 1
#endif

const char *rl_ib_gid_type_str(int type) {
    switch (type) {
    case RL_GID_IB: return "IB";
    case RL_GID_ROCE_V1: return "RoCE v1";
    case RL_GID_ROCE_V2: return "RoCE v2";
    default: return "unknown type";
    }
}

static int gid_is_zero(const union ibv_gid *g) {
    for (int i = 0; i < 16; i++)
        if (g->raw[i]) return 0;
    return 1;
}

static int gid_is_v4mapped(const union ibv_gid *g) {
    for (int i = 0; i < 10; i++)
        if (g->raw[i]) return 0;
    return g->raw[10] == 0xff && g->raw[11] == 0xff;
}

static int gid_is_linklocal(const union ibv_gid *g) { return g->raw[0] == 0xfe && (g->raw[1] & 0xc0) == 0x80; }

const char *rl_ib_gid_mismatch(int type, const uint8_t gid[16], int peer_type, const uint8_t peer_gid[16]) {
    if (type == RL_GID_UNKNOWN || peer_type == RL_GID_UNKNOWN) return NULL; /* sysfs silent: nothing to compare */
    if (type != peer_type) return "GIDs of different RoCE versions (v1 is Ethernet frames, v2 UDP/IP packets)";
    if (type != RL_GID_ROCE_V2) return NULL;
    union ibv_gid a, b;
    memcpy(a.raw, gid, 16);
    memcpy(b.raw, peer_gid, 16);
    if (gid_is_v4mapped(&a) != gid_is_v4mapped(&b)) return "an IPv4 and an IPv6 address (RoCE v2 is UDP over one IP)";
    return NULL;
}

int rl_ib_use_grh(int grh, const uint8_t gid[16], int peer_grh, const uint8_t peer_gid[16]) {
    if (grh || peer_grh) return 1;
    static const uint8_t zero[8];
    /* another subnet: only routers between them, which need the GRH (both prefixes known) */
    return memcmp(gid, zero, 8) && memcmp(peer_gid, zero, 8) && memcmp(gid, peer_gid, 8);
}

void rl_ib_gid_str(const union ibv_gid *g, char *buf, size_t len) {
    if (gid_is_v4mapped(g)) {
        snprintf(buf, len, "::ffff:%u.%u.%u.%u", g->raw[12], g->raw[13], g->raw[14], g->raw[15]);
        return;
    }
    size_t o = 0;
    for (int i = 0; i < 16 && o < len; i += 2)
        o += (size_t)snprintf(buf + o, len - o, "%s%02x%02x", i ? ":" : "", g->raw[i], g->raw[i + 1]);
}

/* First line of a sysfs file, trailing newline cut; -1 when unreadable. */
static int read_line(const char *path, char *buf, size_t len) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *r = fgets(buf, (int)len, f);
    fclose(f);
    if (!r) return -1;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

/* GID `index` and its type: the library's ibv_query_gid_ex when it has one, else
 * ibv_query_gid and sysfs (gid_attrs/types/IDX says "RoCE v2" or "IB/RoCE v1").
 * 0, or -1 for an empty entry. */
static int query_gid_typed(const rl_ibv *v, const rl_ib_port *p, int index, union ibv_gid *gid, int *type,
                           char *ndev, size_t ndevlen) {
    char path[256], line[64];
    *type = RL_GID_UNKNOWN;
    ndev[0] = 0;
    if (v->query_gid_ex) {
        struct ibv_gid_entry e;
        memset(&e, 0, sizeof e);
        if (v->query_gid_ex(p->ctx, (uint32_t)p->port, (uint32_t)index, &e, 0, sizeof e) != 0) return -1;
        *gid = e.gid;
        *type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? RL_GID_ROCE_V2
                : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? RL_GID_ROCE_V1
                                                       : RL_GID_IB;
    } else {
        if (v->query_gid(p->ctx, (uint8_t)p->port, index, gid) != 0) return -1;
        snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", p->dev, p->port, index);
        if (read_line(path, line, sizeof line) == 0) {
            if (strstr(line, "v2")) *type = RL_GID_ROCE_V2;
            else if (strstr(line, "v1")) *type = RL_GID_ROCE_V1;
            else if (!strcmp(line, "IB")) *type = RL_GID_IB;
        }
    }
    if (gid_is_zero(gid)) return -1;
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", p->dev, p->port, index);
    if (read_line(path, line, sizeof line) == 0) snprintf(ndev, ndevlen, "%.31s", line);
    return 0;
}

/* How much a RoCE GID suits: higher is better, 0 = unusable. */
static int gid_score(const union ibv_gid *g, int type, const struct sockaddr_storage *ifaddr) {
    int match = 0;
    if (ifaddr && ifaddr->ss_family == AF_INET && gid_is_v4mapped(g))
        match = !memcmp(&g->raw[12], &((const struct sockaddr_in *)ifaddr)->sin_addr, 4);
    else if (ifaddr && ifaddr->ss_family == AF_INET6)
        match = !memcmp(g->raw, &((const struct sockaddr_in6 *)ifaddr)->sin6_addr, 16);
    int base;
    if (type == RL_GID_ROCE_V2 || type == RL_GID_UNKNOWN) {
        base = gid_is_v4mapped(g) ? 40 : gid_is_linklocal(g) ? 20 : 30;
        if (type == RL_GID_UNKNOWN) base -= 15; /* sysfs silent: below every known v2 GID */
    } else if (type == RL_GID_ROCE_V1) {
        base = 10;
    } else {
        return 0;
    }
    return base + (match ? 50 : 0);
}

/* Chooses the port's GID. Returns -1 (no usable GID, message in err), else how well
 * the port suits: 2 = a RoCE GID holding the bootstrap interface's address, 1 = other. */
static int choose_gid(const rl_ibv *v, rl_ib_port *p, const struct sockaddr_storage *ifaddr, char *err,
                      size_t errlen) {
    long long forced = rl_env_int("RINGLET_IB_GID_INDEX", -1, -1, 1 << 20);
    union ibv_gid g;
    int type;
    char ndev[32];
    if (forced > 255) { /* a queue pair's address names its source GID in 8 bits */
        snprintf(err, errlen, "%s port %d: RINGLET_IB_GID_INDEX=%lld: a queue pair can use GIDs 0..255 only", p->dev,
                 p->port, forced);
        return -1;
    }
    if (forced >= 0) {
        if (forced >= p->attr.gid_tbl_len || query_gid_typed(v, p, (int)forced, &g, &type, ndev, sizeof ndev) != 0) {
            snprintf(err, errlen, "%s port %d: RINGLET_IB_GID_INDEX=%lld is not a valid GID (table of %d)", p->dev,
                     p->port, forced, p->attr.gid_tbl_len);
            return -1;
        }
        p->gid_index = (int)forced;
        p->grh = 1;
        p->gid = g;
        p->gid_type = type;
        snprintf(p->gid_ndev, sizeof p->gid_ndev, "%s", ndev);
        return 1;
    }
    if (!p->is_eth) {
        /* InfiniBand: LID routing, no GRH, unless the port requires one (an SR-IOV virtual
         * function's: its address is the GID); then GID 0, the port's own */
        p->grh = (p->attr.flags & IBV_QPF_GRH_REQUIRED) != 0;
        p->gid_index = p->grh ? 0 : -1;
        p->gid_type = RL_GID_IB;
        if (v->query_gid(p->ctx, (uint8_t)p->port, 0, &p->gid) != 0) memset(&p->gid, 0, sizeof p->gid);
        return 1;
    }
    int best = -1, best_score = 0;
    for (int i = 0; i < p->attr.gid_tbl_len && i < 256; i++) { /* 8 bits in a queue pair's address */
        if (query_gid_typed(v, p, i, &g, &type, ndev, sizeof ndev) != 0) continue;
        int s = gid_score(&g, type, ifaddr);
        if (s > best_score) {
            best_score = s;
            best = i;
            p->gid = g;
            p->gid_type = type;
            snprintf(p->gid_ndev, sizeof p->gid_ndev, "%s", ndev);
        }
    }
    if (best < 0) {
        snprintf(err, errlen, "%s port %d (RoCE): no usable GID (set RINGLET_IB_GID_INDEX)", p->dev, p->port);
        return -1;
    }
    p->gid_index = best;
    p->grh = 1;
    return best_score >= 50 ? 2 : 1;
}

int rl_ib_open_port(const rl_ibv *v, const struct sockaddr_storage *ifaddr, rl_ib_port *out, char *err,
                    size_t errlen) {
    const char *spec_var;
    const char *spec = rl_env_get("RINGLET_IB_HCA", &spec_var);
    int n = 0;
    errno = 0;
    struct ibv_device **list = v->get_device_list(&n);
    if (!list || n <= 0) {
        if (list) snprintf(err, errlen, "no RDMA device found");
        else snprintf(err, errlen, "no RDMA device found (ibv_get_device_list: %s)", strerror(errno));
        if (list) v->free_device_list(list);
        return -1;
    }
    /* Every usable port selected (at most IB_MAX_CANDS), each device kept open while it has
     * one; then the choice (pick_port). */
    enum { IB_MAX_CANDS = 64 };
    rl_ib_port *cands = calloc(IB_MAX_CANDS, sizeof *cands);
    int *scores = calloc(IB_MAX_CANDS, sizeof *scores), nc = 0;
    if (!cands || !scores) {
        free(cands), free(scores);
        v->free_device_list(list);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    char why[256] = "";
    memset(out, 0, sizeof *out);
    for (int d = 0; d < n && nc < IB_MAX_CANDS; d++) {
        const char *name = v->get_device_name(list[d]);
        if (!name) continue;
        /* InfiniBand and RoCE only: an iWARP device has no write with immediate, and one of
         * neither (AWS EFA: datagrams, SRD) no reliable connection at all. */
        if (list[d]->transport_type != IBV_TRANSPORT_IB) {
            snprintf(why, sizeof why, "; %s is not InfiniBand or RoCE (transport type %d)", name,
                     (int)list[d]->transport_type);
            continue;
        }
        /* Skip devices the filter excludes on every port before opening them. */
        int any = 0;
        for (int port = 1; port <= 32 && !any; port++) any = rl_ib_hca_match(spec, name, port);
        if (!any) continue;
        struct ibv_context *ctx = v->open_device(list[d]);
        if (!ctx) {
            snprintf(why, sizeof why, "; %s: cannot open (%s)", name, strerror(errno));
            continue;
        }
        rl_ib_port cand;
        memset(&cand, 0, sizeof cand);
        cand.ctx = ctx;
        snprintf(cand.dev, sizeof cand.dev, "%s", name);
        int kept = 0;
        if (v->query_device(ctx, &cand.dattr) == 0) {
            for (int port = 1; port <= cand.dattr.phys_port_cnt && nc < IB_MAX_CANDS; port++) {
                if (!rl_ib_hca_match(spec, name, port)) continue;
                struct ibv_port_attr pa;
                memset(&pa, 0, sizeof pa);
                if (v->query_port(ctx, (uint8_t)port, &pa) != 0) continue;
                if (pa.state != IBV_PORT_ACTIVE) {
                    snprintf(why, sizeof why, "; %s port %d is not active", name, port);
                    continue;
                }
                /* Unspecified: an InfiniBand device of a kernel that predates the field */
                if (pa.link_layer != IBV_LINK_LAYER_ETHERNET && pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
                    pa.link_layer != IBV_LINK_LAYER_UNSPECIFIED)
                    continue;
                cand.port = port;
                cand.attr = pa;
                cand.is_eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
                char e[200];
                int score = choose_gid(v, &cand, ifaddr, e, sizeof e);
                if (score < 0) {
                    snprintf(why, sizeof why, "; %s", e);
                    continue;
                }
                scores[nc] = score;
                cands[nc++] = cand;
                kept = 1;
            }
        }
        if (!kept) v->close_device(ctx);
    }
    v->free_device_list(list);
    int pick = rl_ib_pick_port(cands, scores, nc, &out->alike);
    if (pick >= 0) {
        int alike = out->alike;
        *out = cands[pick];
        out->alike = alike;
    }
    /* every device but the chosen one's closed (a device's ports share its context) */
    for (int i = 0; i < nc; i++) {
        int first = 1;
        for (int k = 0; k < i; k++) first &= cands[k].ctx != cands[i].ctx;
        if (first && (pick < 0 || cands[i].ctx != cands[pick].ctx)) v->close_device(cands[i].ctx);
    }
    free(cands), free(scores);
    if (pick < 0) {
        snprintf(err, errlen, "no active port%s%s%s%s%s", spec && *spec ? " selected by " : "",
                 spec && *spec ? spec_var : "", spec && *spec ? "=" : "", spec && *spec ? spec : "", why);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

static int alike(const rl_ib_port *a, const rl_ib_port *b) {
    return !a->is_eth && !b->is_eth && a->attr.active_width == b->attr.active_width &&
           a->attr.active_speed == b->attr.active_speed;
}

int rl_ib_pick_port(const rl_ib_port *c, const int *score, int n, int *nalike) {
    *nalike = 0;
    if (n <= 0) return -1;
    int ib = -1, roce = -1; /* the first of the largest group of InfiniBand ports alike; the best RoCE port */
    for (int i = 0; i < n; i++) {
        if (c[i].is_eth) {
            if (roce < 0 || score[i] > score[roce]) roce = i;
            continue;
        }
        int k = 0;
        for (int j = 0; j < n; j++) k += alike(&c[i], &c[j]);
        if (k > *nalike) *nalike = k, ib = i;
    }
    /* InfiniBand before RoCE, unless the RoCE port carries the bootstrap address and the
     * InfiniBand one is alone (a storage card beside a RoCE compute network) */
    if (ib >= 0 && (roce < 0 || score[roce] < 2 || *nalike >= 2)) return ib;
    return roce >= 0 ? roce : ib;
}

#else /* !RL_HAVE_VERBS */

int rl_ib_dmabuf_available(void) { return 0; }
int rl_ib_peermem_loaded(void) { return 0; }

#endif
