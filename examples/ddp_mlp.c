/* Data-parallel training of a small MLP with ringlet's C DDP layer, host memory.
 *
 * Every rank starts from its own random weights and trains on its own shard of a
 * synthetic regression task (a fixed "teacher" network labels random inputs). The DDP
 * object broadcasts rank 0's weights at construction and averages the gradients, so all
 * ranks train the same model. Backward computes the layers' gradients last layer first
 * and reports each one as soon as it is computed: the buckets holding the last layer's
 * gradients are being all-reduced while the first layer's gradients are computed.
 *
 * Build (after make install): cc -O2 ddp_mlp.c $(pkg-config --cflags --libs ringlet) -o ddp_mlp
 * Run:   ringlet-run -n 4 ./ddp_mlp [--steps N] [--hidden H] [--batch B] [--view]
 *   --view  gradients live in the DDP buckets (gradient_as_bucket_view): no copies
 * Prints the loss every few steps (rank 0), and checks at the end that every rank holds
 * the same weights. Exit 0 on success.
 */
#include <ringlet.h>
#include <ringlet_ddp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IN 8

static unsigned long long rng_state;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

typedef struct {
    int hidden;
    float *w1, *b1, *w2, *b2;     /* w1: hidden x IN, b1: hidden, w2: hidden, b2: 1 */
    float *gw1, *gb1, *gw2, *gb2; /* gradients, same shapes */
} mlp_t;

static float *zalloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }

static void mlp_init(mlp_t *m, int hidden, unsigned long long seed) {
    m->hidden = hidden;
    m->w1 = zalloc((size_t)hidden * IN);
    m->b1 = zalloc((size_t)hidden);
    m->w2 = zalloc((size_t)hidden);
    m->b2 = zalloc(1);
    m->gw1 = zalloc((size_t)hidden * IN);
    m->gb1 = zalloc((size_t)hidden);
    m->gw2 = zalloc((size_t)hidden);
    m->gb2 = zalloc(1);
    rng_state = seed;
    for (int i = 0; i < hidden * IN; i++) m->w1[i] = frand() * 0.35f;
    for (int i = 0; i < hidden; i++) m->w2[i] = frand() * 0.25f;
}

static void mlp_free(mlp_t *m) {
    float *all[] = {m->w1, m->b1, m->w2, m->b2, m->gw1, m->gb1, m->gw2, m->gb2};
    for (int i = 0; i < 8; i++) free(all[i]);
}

/* The teacher: a fixed small network, the same on every rank. */
static float teacher(const float *x) {
    static const float a[IN] = {0.5f, -0.3f, 0.8f, 0.1f, -0.6f, 0.2f, 0.4f, -0.7f};
    float s = 0, t = 0;
    for (int k = 0; k < IN; k++) {
        s += a[k] * x[k];
        t += a[IN - 1 - k] * x[k];
    }
    return (s > 0 ? s : 0) - 0.5f * (t > 0 ? t : 0) + 0.1f;
}

static void fail(const char *what, ringlet_result_t rc, const char *msg) {
    fprintf(stderr, "ddp_mlp: %s: %s: %s\n", what, ringlet_strerror(rc), msg);
    exit(1);
}

int main(int argc, char **argv) {
    int steps = 200, hidden = 64, batch = 32, view = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) hidden = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--view")) view = 1;
        else {
            fprintf(stderr, "usage: ddp_mlp [--steps N] [--hidden H] [--batch B] [--view]\n");
            return 2;
        }
    }
    if (steps < 1 || hidden < 1 || batch < 1) {
        fprintf(stderr, "ddp_mlp: --steps, --hidden and --batch must be positive\n");
        return 2;
    }
    ringlet_comm_t comm;
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc) fail("init", rc, ringlet_comm_last_error(NULL));
    int rank, size;
    ringlet_comm_rank(comm, &rank);
    ringlet_comm_size(comm, &size);

    mlp_t m;
    mlp_init(&m, hidden, 1000 + (unsigned long long)rank); /* a different init on every rank */

    /* Registration order = forward order; the DDP layer buckets them in reverse. */
    int64_t s_w1[2] = {hidden, IN}, s_h[1] = {hidden}, s_w2[2] = {1, hidden}, s_1[1] = {1};
    ringlet_ddp_tensor_t params[4] = {
        {"fc1.weight", m.w1, m.gw1, (size_t)hidden * IN, RINGLET_FLOAT32, RINGLET_DDP_HOST, 2, s_w1},
        {"fc1.bias", m.b1, m.gb1, (size_t)hidden, RINGLET_FLOAT32, RINGLET_DDP_HOST, 1, s_h},
        {"fc2.weight", m.w2, m.gw2, (size_t)hidden, RINGLET_FLOAT32, RINGLET_DDP_HOST, 2, s_w2},
        {"fc2.bias", m.b2, m.gb2, 1, RINGLET_FLOAT32, RINGLET_DDP_HOST, 1, s_1},
    };
    ringlet_ddp_options_t opt;
    ringlet_ddp_options_init(&opt);
    opt.bucket_cap_bytes = 1024; /* tiny, to have several buckets in a tiny model */
    opt.first_bucket_cap_bytes = 256;
    opt.gradient_as_bucket_view = view;
    ringlet_ddp_t ddp;
    rc = ringlet_ddp_create(&ddp, comm, params, 4, NULL, 0, &opt);
    if (rc) fail("ringlet_ddp_create", rc, ringlet_ddp_last_error(NULL));
    float *g[4] = {m.gw1, m.gb1, m.gw2, m.gb2};
    if (view) /* the gradients live in the buckets */
        for (int i = 0; i < 4; i++) ringlet_ddp_grad_view(ddp, i, (void **)&g[i]);
    int nbuckets;
    ringlet_ddp_num_buckets(ddp, &nbuckets);
    if (rank == 0)
        printf("ddp_mlp: %d ranks, MLP %d-%d-1, batch %d per rank, %d buckets%s\n", size, IN, hidden, batch, nbuckets,
               view ? ", gradients as bucket views" : "");

    float *x = malloc(sizeof(float) * (size_t)batch * IN), *y = malloc(sizeof(float) * (size_t)batch);
    float *h = malloc(sizeof(float) * (size_t)batch * hidden), *dh = malloc(sizeof(float) * (size_t)hidden);
    float *out = malloc(sizeof(float) * (size_t)batch);
    const float lr = 0.05f;
    double first_loss = -1, loss = 0;
    for (int step = 0; step < steps; step++) {
        /* this rank's shard */
        rng_state = 0x5eedULL + 1000003ULL * (unsigned long long)step + (unsigned long long)rank * 7919ULL;
        for (int b = 0; b < batch; b++) {
            for (int k = 0; k < IN; k++) x[b * IN + k] = frand();
            y[b] = teacher(&x[b * IN]);
        }
        if ((rc = ringlet_ddp_pre_forward(ddp, 1))) fail("pre_forward", rc, ringlet_ddp_last_error(ddp));
        /* forward */
        loss = 0;
        for (int b = 0; b < batch; b++) {
            float o = m.b2[0];
            for (int j = 0; j < hidden; j++) {
                float a = m.b1[j];
                for (int k = 0; k < IN; k++) a += m.w1[j * IN + k] * x[b * IN + k];
                h[b * hidden + j] = a > 0 ? a : 0;
                o += m.w2[j] * h[b * hidden + j];
            }
            out[b] = o;
            loss += (double)(o - y[b]) * (o - y[b]) / batch;
        }
        if (first_loss < 0) first_loss = loss;
        /* backward, last layer first; report each gradient as soon as it is complete */
        memset(g[0], 0, sizeof(float) * (size_t)hidden * IN);
        memset(g[1], 0, sizeof(float) * (size_t)hidden);
        memset(g[2], 0, sizeof(float) * (size_t)hidden);
        g[3][0] = 0;
        for (int b = 0; b < batch; b++) {
            float d = 2.0f * (out[b] - y[b]) / (float)batch;
            g[3][0] += d;
            for (int j = 0; j < hidden; j++) g[2][j] += d * h[b * hidden + j];
        }
        if ((rc = ringlet_ddp_grad_ready(ddp, 3, NULL))) fail("grad_ready", rc, ringlet_ddp_last_error(ddp));
        if ((rc = ringlet_ddp_grad_ready(ddp, 2, NULL))) fail("grad_ready", rc, ringlet_ddp_last_error(ddp));
        for (int b = 0; b < batch; b++) {
            float d = 2.0f * (out[b] - y[b]) / (float)batch;
            for (int j = 0; j < hidden; j++) {
                dh[j] = h[b * hidden + j] > 0 ? d * m.w2[j] : 0;
                g[1][j] += dh[j];
                for (int k = 0; k < IN; k++) g[0][j * IN + k] += dh[j] * x[b * IN + k];
            }
        }
        if ((rc = ringlet_ddp_grad_ready(ddp, 1, NULL))) fail("grad_ready", rc, ringlet_ddp_last_error(ddp));
        if ((rc = ringlet_ddp_grad_ready(ddp, 0, NULL))) fail("grad_ready", rc, ringlet_ddp_last_error(ddp));
        /* wait for the buckets: the gradients are averaged over the ranks */
        if ((rc = ringlet_ddp_finish(ddp))) fail("finish", rc, ringlet_ddp_last_error(ddp));
        /* SGD */
        for (int i = 0; i < hidden * IN; i++) m.w1[i] -= lr * g[0][i];
        for (int j = 0; j < hidden; j++) {
            m.b1[j] -= lr * g[1][j];
            m.w2[j] -= lr * g[2][j];
        }
        m.b2[0] -= lr * g[3][0];
        if (rank == 0 && (step % 50 == 0 || step == steps - 1))
            printf("ddp_mlp: step %d: loss on rank 0's shard %.5f\n", step, loss);
    }

    /* every rank holds the same weights: compare a checksum's min and max over ranks */
    double sum = 0;
    for (int i = 0; i < hidden * IN; i++) sum += m.w1[i] * (1 + i % 7);
    for (int j = 0; j < hidden; j++) sum += m.b1[j] * 3 + m.w2[j] * 5;
    sum += m.b2[0];
    double lo = sum, hi = sum;
    ringlet_allreduce(&lo, &lo, 1, RINGLET_FLOAT64, RINGLET_MIN, comm, NULL);
    ringlet_allreduce(&hi, &hi, 1, RINGLET_FLOAT64, RINGLET_MAX, comm, NULL);
    int ok = lo == hi && loss < first_loss;
    if (rank == 0)
        printf("ddp_mlp: rank 0: loss %.5f -> %.5f after %d steps; weights identical on all %d ranks: %s\n",
               first_loss, loss, steps, size, lo == hi ? "yes" : "NO");
    ringlet_ddp_destroy(ddp);
    ringlet_comm_destroy(comm);
    free(x);
    free(y);
    free(h);
    free(dh);
    free(out);
    mlp_free(&m);
    return ok ? 0 : 1;
}
