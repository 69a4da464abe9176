/* ringlet-perf: bandwidth and correctness of ringlet's collectives, with the
 * output layout of nccl-tests (all_reduce_perf and friends), so that tables from
 * the two diff line by line.
 *
 *   ringlet-run -n 4 ringlet-perf allreduce -b 4K -e 64M -f 4 -c 1
 *
 * One process per rank; the ranks come from the launcher's environment
 * (ringlet_comm_init_env). Only rank 0 prints. See perf/README.md; perf.h lists the
 * other files. This one: the communicator, the buffers, the loop over sizes.
 *
 * Uses the public header include/ringlet.h, and the device layer's internal header
 * (src/device/device.h) for device memory and streams (-M device): the same source runs
 * over CUDA on a GPU and over the simulated GPU (RINGLET_DEVICE=sim).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

static void *alloc64(size_t bytes) {
    size_t b = (bytes + 63) / 64 * 64;
    if (b == 0) b = 64;
    return aligned_alloc(64, b);
}

int main(int argc, char **argv) {
    opts_t o;
    int guess = env_rank_guess();
    int pr = parse_args(argc, argv, &o, guess == 0);
    if (pr == 2) return 0;
    if (pr) return 1;

    ctx_t C = {0};
    ctx_t *c = &C;
    c->o = o;
    c->rank = -1;

    ringlet_result_t res = ringlet_comm_init_env(&c->comm);
    if (res != RINGLET_SUCCESS) {
        c->comm = NULL;
        die_ringlet(c, "ringlet_comm_init_env", res);
    }
    CHECK_RL(c, "ringlet_comm_rank", ringlet_comm_rank(c->comm, &c->rank));
    CHECK_RL(c, "ringlet_comm_size", ringlet_comm_size(c->comm, &c->nranks));
    int local_rank = 0;
    CHECK_RL(c, "ringlet_comm_local_rank", ringlet_comm_local_rank(c->comm, &local_rank));

    if (kColl[o.coll].has_root && o.root >= c->nranks) { /* checked on every rank: all exit */
        fprintf(stderr, "ringlet-perf: root %d is not below nranks %d\n", o.root, c->nranks);
        ringlet_comm_destroy(c->comm);
        return 1;
    }

    /* buffers: allocated once at the largest size, first touched here */
    c->alloc_bytes = (o.maxb + 63) / 64 * 64;
    if (c->alloc_bytes == 0) c->alloc_bytes = 64;
    c->sbuf = alloc64(c->alloc_bytes);
    c->rbuf = alloc64(c->alloc_bytes);
    c->nreqs = o.iters > o.warmup ? o.iters : o.warmup;
    if (c->nreqs < 1) c->nreqs = 1;
    c->reqs = calloc((size_t)c->nreqs, sizeof *c->reqs);
    if (o.per_iter) {
        c->iter_s = calloc(2 * (size_t)o.iters, sizeof *c->iter_s);
        c->iter_red = calloc(2 * (size_t)o.iters, sizeof *c->iter_red);
    }
    if (!c->sbuf || !c->rbuf || !c->reqs || (o.per_iter && (!c->iter_s || !c->iter_red))) {
        fprintf(stderr, "ringlet-perf: rank %d: cannot allocate 2 x %zu bytes\n", c->rank, c->alloc_bytes);
        ringlet_comm_abort(c->comm);
        return 1;
    }
    memset(c->sbuf, 0, c->alloc_bytes); /* first touch, by the rank that uses them */
    memset(c->rbuf, 0, c->alloc_bytes);

    /* -M: device memory when asked, or by default when a device backend runs */
    const rl_device_ops *dev = rl_device();
    if (o.memory == 1 && !dev) {
        fprintf(stderr, "ringlet-perf: rank %d: -M device, but no device backend: %s\n", c->rank,
                rl_device_unavailable());
        ringlet_comm_abort(c->comm);
        return 1;
    }
    int device = -1;
    if (dev && o.memory != 0) {
        int ndev = 0;
        c->dev = dev;
        if (dev->count(&ndev) != RL_DEV_OK || ndev < 1) die_dev(c, "device count");
        device = local_rank % ndev; /* one device per local rank, round robin */
        if (dev->set_device(device) != RL_DEV_OK) die_dev(c, "set device");
        if (dev->mem_alloc((void **)&c->dsbuf, c->alloc_bytes) != RL_DEV_OK ||
            dev->mem_alloc((void **)&c->drbuf, c->alloc_bytes) != RL_DEV_OK)
            die_dev(c, "device memory for the buffers");
        if (dev->stream_create(&c->stream) != RL_DEV_OK) die_dev(c, "stream");
    }

    /* who is where */
    rankinfo_t mine;
    memset(&mine, 0, sizeof mine);
    mine.pid = (int32_t)getpid();
    mine.local_rank = local_rank;
    if (gethostname(mine.host, sizeof mine.host - 1) != 0) strcpy(mine.host, "?");
    if (c->dev) snprintf(mine.memory, sizeof mine.memory, "device %d (%s)", device, c->dev->name);
    else snprintf(mine.memory, sizeof mine.memory, "host memory");
    rankinfo_t *all = calloc((size_t)c->nranks, sizeof *all);
    if (!all) {
        fprintf(stderr, "ringlet-perf: out of memory\n");
        ringlet_comm_abort(c->comm);
        return 1;
    }
    CHECK_RL(c, "ringlet_allgather (rank info)",
             ringlet_allgather(&mine, all, sizeof mine, RINGLET_UINT8, c->comm, NULL));

    /* -J: rank 0 opens the file; every rank learns whether it could */
    if (o.json) {
        int32_t ok = 1, all_ok = 0;
        if (c->rank == 0) {
            c->json = fopen(o.json, "w");
            if (!c->json) {
                fprintf(stderr, "ringlet-perf: cannot write %s: %s\n", o.json, strerror(errno));
                ok = 0;
            }
        }
        CHECK_RL(c, "ringlet_allreduce (json)", ringlet_allreduce(&ok, &all_ok, 1, RINGLET_INT32, RINGLET_MIN, c->comm, NULL));
        if (!all_ok) {
            if (c->rank != 0) fprintf(stderr, "ringlet-perf: rank 0 cannot write %s (-J)\n", o.json);
            ringlet_comm_destroy(c->comm);
            return 1;
        }
    }
    if (c->rank == 0) print_header(c, all);
    if (c->json) json_begin(c, all);
    free(all);

    totals_t tot = {0, 0, 0};
    int ntypes = o.all_types ? NTYPES : 1;
    int nops = (o.all_ops && kColl[o.coll].has_op) ? NOPS : 1;
    for (int ti = 0; ti < ntypes; ti++) {
        c->dt = o.all_types ? kTypes[ti].dt : o.dt;
        c->ts = ringlet_datatype_size(c->dt);
        if (c->ts == 0) {
            fprintf(stderr, "ringlet-perf: the library does not know type %s\n", type_name(c->dt));
            ringlet_comm_destroy(c->comm);
            return 1;
        }
        for (int oi = 0; oi < nops; oi++) {
            c->op = o.all_ops ? kOps[oi].op : o.op;
            if (c->rank == 0) print_table_header();
            size_t sz = o.minb;
            for (;;) {
                run_size(c, sz, &tot);
                size_t next;
                if (o.stepfactor > 1) {
                    if (sz == 0 || sz > SIZE_MAX / (size_t)o.stepfactor) break;
                    next = sz * (size_t)o.stepfactor;
                } else {
                    if (sz > SIZE_MAX - o.stepbytes) break;
                    next = sz + o.stepbytes;
                }
                if (next > o.maxb) break;
                sz = next;
            }
        }
    }

    if (c->rank == 0) print_footer(c, &tot);
    if (c->json) {
        json_end(c, &tot);
        if (fclose(c->json) != 0) fprintf(stderr, "ringlet-perf: writing %s: %s\n", o.json, strerror(errno));
        c->json = NULL;
    }
    CHECK_RL(c, "ringlet_comm_destroy", ringlet_comm_destroy(c->comm));
    c->comm = NULL;
    if (c->dev) {
        c->dev->mem_free(c->dsbuf);
        c->dev->mem_free(c->drbuf);
        c->dev->stream_destroy(c->stream);
    }
    free(c->sbuf);
    free(c->rbuf);
    free(c->reqs);
    free(c->iter_s);
    free(c->iter_red);
    return tot.wrong_total ? 2 : 0; /* every rank knows the total */
}
