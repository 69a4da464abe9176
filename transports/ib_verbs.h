/* The verbs library, loaded at run time, and the choice of device, port and GID.
 *
 * libringlet never links libibverbs: rl_ibv_load() dlopens libibverbs.so.1 and fills a
 * table of function pointers, so the library loads and runs (over TCP) on a machine
 * without rdma-core. Code here and in ib.c calls verbs only through that table, or
 * through the static inline functions of <infiniband/verbs.h> that go through the
 * device's own ops (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq);
 * never through a name the header turns into a link-time reference.
 *
 * librdmacm is not needed: queue pairs are connected with an exchange over a TCP
 * socket of the transport's own (as NCCL does), so it is neither linked nor loaded.
 *
 * Built without <infiniband/verbs.h> (RL_HAVE_VERBS undefined), the IB transport
 * reports itself unavailable.
 */
#ifndef RINGLET_IB_VERBS_H
#define RINGLET_IB_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#if defined(__has_include)
#if __has_include(<infiniband/verbs.h>)
#define RL_HAVE_VERBS 1
#endif
#endif

/* RINGLET_IB_HCA filter, NCCL_IB_HCA's syntax: a comma-separated list of entries
 * "name" or "name:port"; names match as prefixes ("mlx5" selects mlx5_0, mlx5_1), or
 * exactly when the list starts with '=' ("=mlx5_1"); a leading '^' turns the list into
 * an exclude list ("^mlx5_0:1", "^=mlx5_1"). An entry without a port covers every port
 * of the device. NULL or "": everything. Returns 1 when port `port` of device `dev`
 * is selected. */
int rl_ib_hca_match(const char *spec, const char *dev, int port);

/* GPUDirect RDMA: 1 when the loaded libibverbs can register dma-buf memory
 * (ibv_reg_dmabuf_mr), the route for GPU buffers on current kernels; 0 otherwise
 * (and always before a successful rl_ibv_load). */
int rl_ib_dmabuf_available(void);
/* 1 when the nvidia-peermem kernel module (the older route) is loaded. */
int rl_ib_peermem_loaded(void);
/* How registered memory fares across fork(), once rl_ibv_load succeeded: "unneeded (...)"
 * where the kernel copies pages under DMA into the child at fork (Linux >= 5.13), "on"
 * where ibv_fork_init made registrations MADV_DONTFORK, or why it is off. */
const char *rl_ib_fork_state(void);

#ifdef RL_HAVE_VERBS
#include <infiniband/verbs.h>

typedef struct rl_ibv {
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    /* The exported ibv_query_port (the header wraps it in a macro): called with a
     * zeroed full struct ibv_port_attr. */
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
    int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
    /* Optional (rdma-core >= 32): GID entry with its type; NULL when absent. */
    int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
                        uint32_t flags, size_t entry_size);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    /* Optional (rdma-core >= 34): registration of a dma-buf (GPU memory); NULL when absent. */
    struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd,
                                    int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                                int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
    struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int (*destroy_qp)(struct ibv_qp *qp);
    int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
    void (*ack_async_event)(struct ibv_async_event *ev);
    const char *(*wc_status_str)(enum ibv_wc_status status);
    const char *(*event_type_str)(enum ibv_event_type type);
    /* Optional: fork protection (rl_ibv_load calls it where the kernel needs it; see
     * rl_ib_fork_state). */
    int (*fork_init)(void);
    int (*is_fork_initialized)(void); /* enum ibv_fork_status; rdma-core >= 35 */
    char path[512]; /* what was loaded */
} rl_ibv;

/* The process's verbs table, loaded on first use (and kept: providers do not like
 * being unloaded). NULL with a message in err when RINGLET_IB_DISABLE is set, or the
 * library (RINGLET_IB_LIBDIR/libibverbs.so.1 when that is set, else the loader's
 * libibverbs.so.1) or one of its required symbols is missing. */
const rl_ibv *rl_ibv_load(char *err, size_t errlen);

enum { RL_GID_UNKNOWN = -1, RL_GID_IB = 0, RL_GID_ROCE_V1 = 1, RL_GID_ROCE_V2 = 2 };

/* The port this rank uses, opened. */
typedef struct rl_ib_port {
    struct ibv_context *ctx;
    char dev[64];
    int port;
    struct ibv_port_attr attr;
    struct ibv_device_attr dattr;
    int is_eth;      /* RoCE (link layer Ethernet): addressed by GID */
    int gid_index;   /* -1: none (InfiniBand without RINGLET_IB_GID_INDEX: LID routing) */
    int gid_type;    /* RL_GID_* */
    int grh;         /* sends carry a GRH: RoCE; InfiniBand with a GID index set, or whose port
                      * requires it (a virtual function's, IBV_QPF_GRH_REQUIRED): GID 0 */
    union ibv_gid gid;
    char gid_ndev[32]; /* netdev of the GID when known */
    int alike;         /* InfiniBand ports like this one here (rl_ib_pick_port) */
} rl_ib_port;

/* Opens the active port selected by RINGLET_IB_HCA that rl_ib_pick_port chooses (devices in
 * the order the library lists them, ports in order) and chooses its GID: RINGLET_IB_GID_INDEX
 * when set, else on RoCE the RoCE v2 GID holding the bootstrap interface's address
 * (ifaddr), else a RoCE v2 IPv4-mapped GID, else a RoCE v2 global IPv6 GID, else any
 * RoCE v2 GID, else RoCE v1. 0, or -1 with a message. */
int rl_ib_open_port(const rl_ibv *v, const struct sockaddr_storage *ifaddr, rl_ib_port *out, char *err,
                    size_t errlen);

/* Which of n usable ports (score: choose_gid's, 2 on a RoCE port whose GID holds the
 * bootstrap interface's address) every rank of a host takes: InfiniBand before RoCE (a
 * RoCE port beside several InfiniBand ones is most often the front end's), the first of
 * the largest group of InfiniBand ports alike (width and speed); but the RoCE port of the
 * bootstrap address before a lone InfiniBand one (a storage card); on RoCE the best score,
 * first. *alike: the size of that InfiniBand group. -1 when n is 0. */
int rl_ib_pick_port(const rl_ib_port *cands, const int *score, int n, int *alike);
/* "RoCE v2", "IB", ... */
const char *rl_ib_gid_type_str(int type);
/* Whether a connection between GIDs of these types can carry traffic: NULL, or what
 * differs ("RoCE v1 and RoCE v2", "an IPv4 and an IPv6 address"): such queue pairs
 * connect, and every send then ends in "retry counter exceeded" seconds later. */
const char *rl_ib_gid_mismatch(int type, const uint8_t gid[16], int peer_type, const uint8_t peer_gid[16]);
/* Whether this side's queue pairs to a peer address it with a GRH: where either side's
 * port uses one (grh), or their subnet prefixes differ (routed InfiniBand). */
int rl_ib_use_grh(int grh, const uint8_t gid[16], int peer_grh, const uint8_t peer_gid[16]);
/* The GID as text: "::ffff:192.0.2.1" style for IPv4-mapped, else 8 groups of hex. */
void rl_ib_gid_str(const union ibv_gid *gid, char *buf, size_t len);
#endif /* RL_HAVE_VERBS */

#endif
