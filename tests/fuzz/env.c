/* Fuzz target: the parsers of environment variables.
 *   byte 0 % 4 = 0: rl_parse_int (RINGLET_* integers and sizes such as "256K");
 *                   byte 1 picks the bounds, the rest is the value
 *              1: rl_parse_double (RINGLET_TIMEOUT); byte 1 picks the bounds
 *              2: rl_netif_match (RINGLET_SOCKET_IFNAME): "spec\0ifname"
 *              3: rl_ib_hca_match (RINGLET_IB_HCA): byte 1 the port, "spec\0device" */
#include <limits.h>
#include <stdint.h>

#include "fuzz.h"
#include "ib_verbs.h"
#include "netif.h"
#include "util.h"

/* Bounds the library passes, and the extremes. */
static const long long int_bounds[][2] = {
    {4096, 1LL << 30},      {1, 64},       {0, 1LL << 30},       {4096, 64LL << 20}, {0, 1},
    {0, 1000000},           {1, 1 << 20},  {LLONG_MIN, LLONG_MAX}, {0, LLONG_MAX},   {LLONG_MIN, 0},
    {-(1LL << 40), 1 << 20}, {2, 65},
};
static const double dbl_bounds[][2] = {{0.1, 1e7}, {0, 1}, {-1e300, 1e300}};

/* "a\0b" into two strings; b is "" without a NUL. */
static void split(char *s, size_t n, const char **a, const char **b) {
    size_t i = strnlen(s, n);
    *a = s;
    *b = i < n ? s + i + 1 : s + n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in), arg = fz_u8(&in);
    size_t n = in.n;
    char *s = fz_str(&in);
    switch (sel % 4) {
    case 0: {
        const long long *b = int_bounds[arg % (sizeof int_bounds / sizeof int_bounds[0])];
        long long v = 0;
        if (rl_parse_int(s, b[0], b[1], &v) == 0) FZ_CHECK(v >= b[0] && v <= b[1]);
        break;
    }
    case 1: {
        const double *b = dbl_bounds[arg % (sizeof dbl_bounds / sizeof dbl_bounds[0])];
        double v = 0;
        if (rl_parse_double(s, b[0], b[1], &v) == 0) FZ_CHECK(v >= b[0] && v <= b[1]);
        break;
    }
    case 2: {
        const char *spec, *name;
        split(s, n, &spec, &name);
        int m = rl_netif_match(spec, name);
        FZ_CHECK(m == 0 || m == 1);
        if (!*spec) FZ_CHECK(m == 1); /* no restriction */
        /* An exclude list selects exactly what the same include list does not. */
        if (spec[0] == '^' && spec[1] && spec[1] != '^') FZ_CHECK(m == !rl_netif_match(spec + 1, name));
        break;
    }
    case 3: {
        const char *spec, *dev;
        split(s, n, &spec, &dev);
        int m = rl_ib_hca_match(spec, dev, arg);
        FZ_CHECK(m == 0 || m == 1);
        if (!*spec) FZ_CHECK(m == 1);
        if (spec[0] == '^' && spec[1] && spec[1] != '^') FZ_CHECK(m == !rl_ib_hca_match(spec + 1, dev, arg));
        break;
    }
    }
    free(s);
    return 0;
}
