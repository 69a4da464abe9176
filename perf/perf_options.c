/* ringlet-perf's command line: nccl-tests' flags (perf/README.md says which, and how
 * ringlet-perf's differ), and its own. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

int env_rank_guess(void) {
    const char *names[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringlet-perf allreduce|broadcast|reduce|allgather|reducescatter [flags]\n"
            "  -b minbytes   smallest size (default 32M; K/M/G suffixes, powers of 1024)\n"
            "  -e maxbytes   largest size (default 32M)\n"
            "  -f factor     multiply the size by this step factor\n"
            "  -i stepbytes  add this many bytes per step (default 1M; used when no -f > 1)\n"
            "  -n iters      timed iterations per size (default 20)\n"
            "  -w iters      warm-up iterations per size and form (default 5)\n"
            "  -T seconds    time about this long per size and form: the timed calls are as many as\n"
            "                the slowest rank's time of 10 says (at least -n; blocking calls, no -I)\n"
            "  -c 0|1        check results (default 1)\n"
            "  -d type       int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16\n"
            "                float|float32 double|float64 all (default float)\n"
            "  -o op         sum prod min max avg all (default sum)\n"
            "  -r root       root rank of broadcast and reduce (default 0)\n"
            "  -z 0|1        1: blocking calls; 0: issue the non-blocking forms, then wait (default 1)\n"
            "  -a 0|1|2|3    time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max (default 3)\n"
            "  -I 0|1        1: time each iteration; min/median/max lines, and the times in -J (default 0)\n"
            "  -J file       rank 0 writes every row (and -I's times) to file as JSON\n"
            "  -M host|device  buffers in host or device memory (default: device when a GPU is usable,\n"
            "                or RINGLET_DEVICE=sim asks for the simulated one; else host). Device: calls\n"
            "                are ordered on a stream and each size's timing ends with a stream sync\n"
            "  -t 1, -g 1    threads per process, GPUs per thread: 1, the only value (a rank is one\n"
            "                process with one device; more ranks come from the launcher)\n"
            "  -h            this text\n"
            "Launch one process per rank, e.g.: ringlet-run -n 4 ringlet-perf allreduce -b 4K -e 64M -f 4\n");
}

static int parse_size(const char *s, size_t *out) {
    errno = 0;
    char *end;
    if (*s == '-' || *s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned long long mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0') return -1;
    if (v > SIZE_MAX / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int parse_args(int argc, char **argv, opts_t *o, int talk) {
    *o = (opts_t){.coll = C_ALLREDUCE,
                  .minb = 32u << 20,
                  .maxb = 32u << 20,
                  .stepbytes = 1u << 20,
                  .stepfactor = 1,
                  .iters = 20,
                  .warmup = 5,
                  .check = 1,
                  .blocking = 1,
                  .root = 0,
                  .dt = RINGLET_FLOAT32,
                  .op = RINGLET_SUM,
                  .average = 3,
                  .memory = -1};
    const char *collname = NULL;
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        collname = argv[1];
        first = 2;
    }
    int emax_given = 0, factor_given = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (talk) usage(stdout);
            return 2;
        }
        if (a[0] != '-' || a[1] == '\0' || a[2] != '\0') {
            if (!collname && a[0] != '-') {
                collname = a;
                continue;
            }
            fprintf(stderr, "ringlet-perf: unexpected argument '%s'\n", a);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ringlet-perf: %s needs a value\n", a);
            return 1;
        }
        const char *v = argv[++i];
        long l = 0;
        int bad = 0;
        switch (a[1]) {
        case 'b':
            bad = parse_size(v, &o->minb);
            break;
        case 'e':
            bad = parse_size(v, &o->maxb);
            emax_given = 1;
            break;
        case 'f':
            bad = parse_int(v, 1, 1 << 20, &l);
            o->stepfactor = l;
            factor_given = l > 1;
            break;
        case 'i':
            bad = parse_size(v, &o->stepbytes) || o->stepbytes == 0;
            if (!factor_given) o->stepfactor = 1; /* a factor above 1 wins in either order, as nccl-tests' */
            break;
        case 'n':
            bad = parse_int(v, 1, INT_MAX, &l);
            o->iters = (int)l;
            break;
        case 'w':
            bad = parse_int(v, 0, INT_MAX, &l);
            o->warmup = (int)l;
            break;
        case 'T': {
            char *end;
            o->target_s = strtod(v, &end);
            bad = *end != '\0' || !(o->target_s > 0 && o->target_s <= 3600);
            break;
        }
        case 'c':
            bad = parse_int(v, 0, INT_MAX, &l);
            if (!bad && l > 1) { /* nccl-tests' number of checked iterations */
                fprintf(stderr, "ringlet-perf: -c %s: each form is checked once, after its timed calls: -c takes 0 or 1\n", v);
                return 1;
            }
            o->check = (int)l;
            break;
        case 'z':
            bad = parse_int(v, 0, 1, &l);
            o->blocking = (int)l;
            break;
        case 'r':
            bad = parse_int(v, 0, INT_MAX, &l);
            o->root = (int)l;
            break;
        case 'a':
            bad = parse_int(v, 0, 3, &l);
            o->average = (int)l;
            o->average_given = 1;
            break;
        case 'I':
            bad = parse_int(v, 0, 1, &l);
            o->per_iter = (int)l;
            break;
        case 'J':
            bad = *v == '\0';
            o->json = v;
            break;
        case 'M':
            bad = strcmp(v, "host") != 0 && strcmp(v, "device") != 0;
            o->memory = strcmp(v, "device") == 0;
            break;
        case 't':
        case 'g':
            /* nccl-tests runs -t threads of -g GPUs each in a process, one rank per GPU;
             * a ringlet rank is a process with one device, so 1 is all it can honour. */
            bad = parse_int(v, 1, INT_MAX, &l);
            if (!bad && l != 1) {
                fprintf(stderr, "ringlet-perf: %s %s: %s\n", a, v,
                        a[1] == 't' ? "one thread per process only: each rank is a process of its own; start more "
                                      "ranks with the launcher (ringlet-run -n N, torchrun, srun, mpirun)"
                                    : "one GPU per process only: each rank uses one device (its local rank's); "
                                      "start one rank per GPU with the launcher (ringlet-run -n N, torchrun, "
                                      "srun, mpirun)");
                return 1;
            }
            break;
        case 'd': {
            bad = 1;
            o->all_types = strcmp(v, "all") == 0;
            if (o->all_types) bad = 0;
            for (int t = 0; t < NTYPES && bad; t++)
                if (strcmp(v, kTypes[t].name) == 0 || (kTypes[t].alias1 && strcmp(v, kTypes[t].alias1) == 0) ||
                    (kTypes[t].alias2 && strcmp(v, kTypes[t].alias2) == 0)) {
                    o->dt = kTypes[t].dt;
                    bad = 0;
                }
            break;
        }
        case 'o': {
            bad = 1;
            o->op_given = 1;
            o->all_ops = strcmp(v, "all") == 0;
            if (o->all_ops) bad = 0;
            for (int k = 0; k < NOPS && bad; k++)
                if (strcmp(v, kOps[k].name) == 0) {
                    o->op = kOps[k].op;
                    bad = 0;
                }
            break;
        }
        default:
            fprintf(stderr, "ringlet-perf: unknown flag %s\n", a);
            return 1;
        }
        if (bad) {
            fprintf(stderr, "ringlet-perf: bad value '%s' for %s\n", v, a);
            return 1;
        }
    }
    if (!collname) {
        fprintf(stderr, "ringlet-perf: name a collective first\n");
        if (talk) usage(stderr);
        return 1;
    }
    int found = 0;
    for (int c = 0; c < C_COUNT; c++)
        if (strcmp(collname, kColl[c].name) == 0 || strcmp(collname, kColl[c].alias1) == 0 ||
            strcmp(collname, kColl[c].alias2) == 0) {
            o->coll = (coll_t)c;
            found = 1;
        }
    if (!found) {
        fprintf(stderr, "ringlet-perf: unknown collective '%s'\n", collname);
        return 1;
    }
    if (!emax_given && o->maxb < o->minb) o->maxb = o->minb;
    if (o->maxb < o->minb) {
        fprintf(stderr, "ringlet-perf: maxbytes (-e) is below minbytes (-b)\n");
        return 1;
    }
    if (!kColl[o->coll].has_op && o->op_given && (o->all_ops || o->op != RINGLET_SUM)) {
        fprintf(stderr, "ringlet-perf: %s does not reduce; -o %s is not supported with it\n", kColl[o->coll].name,
                o->all_ops ? "all" : op_name(o->op));
        return 1;
    }
    if (o->target_s > 0 && (!o->blocking || o->per_iter)) {
        fprintf(stderr, "ringlet-perf: -T times blocking calls without -I (their request and time arrays are -n long)\n");
        return 1;
    }
    /* -r with a collective that has no root is ignored (root column -1), as in nccl-tests,
     * so that one set of flags serves every collective */
    return 0;
}
