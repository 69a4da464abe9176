/* ringlet-perf: the collectives, element types and ops it knows, element access, and
 * the deterministic input pattern every rank fills and the checker recomputes. */
#include <string.h>

#include "perf.h"

/* ------------------------------------------------------------------------- */
/* collectives                                                               */

const coll_info_t kColl[C_COUNT] = {
    [C_ALLREDUCE] = {"allreduce", "all_reduce", "all_reduce_perf", 1, 0},
    [C_BROADCAST] = {"broadcast", "bcast", "broadcast_perf", 0, 1},
    [C_REDUCE] = {"reduce", "reduce_perf", "reduce_perf", 1, 1},
    [C_ALLGATHER] = {"allgather", "all_gather", "all_gather_perf", 0, 0},
    [C_REDUCESCATTER] = {"reducescatter", "reduce_scatter", "reduce_scatter_perf", 1, 0},
};

double bus_factor(coll_t c, int n) {
    switch (c) {
    case C_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case C_ALLGATHER:
    case C_REDUCESCATTER:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

/* ------------------------------------------------------------------------- */
/* data types and ops                                                        */

const type_info_t kTypes[] = {
    {"int8", "char", NULL, RINGLET_INT8},          {"uint8", NULL, NULL, RINGLET_UINT8},
    {"int32", "int", NULL, RINGLET_INT32},         {"uint32", NULL, NULL, RINGLET_UINT32},
    {"int64", NULL, NULL, RINGLET_INT64},          {"uint64", NULL, NULL, RINGLET_UINT64},
    {"half", "float16", "fp16", RINGLET_FLOAT16},  {"float", "float32", "fp32", RINGLET_FLOAT32},
    {"double", "float64", "fp64", RINGLET_FLOAT64}, {"bfloat16", "bf16", NULL, RINGLET_BFLOAT16},
};
const int NTYPES = (int)(sizeof kTypes / sizeof kTypes[0]);

const op_info_t kOps[] = {
    {"sum", RINGLET_SUM}, {"prod", RINGLET_PROD}, {"max", RINGLET_MAX}, {"min", RINGLET_MIN}, {"avg", RINGLET_AVG},
};
const int NOPS = (int)(sizeof kOps / sizeof kOps[0]);

const char *type_name(ringlet_datatype_t dt) {
    for (int i = 0; i < NTYPES; i++)
        if (kTypes[i].dt == dt) return kTypes[i].name;
    return "?";
}

const char *op_name(ringlet_op_t op) {
    for (int i = 0; i < NOPS; i++)
        if (kOps[i].op == op) return kOps[i].name;
    return "?";
}

int is_float(ringlet_datatype_t dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64 || dt == RINGLET_BFLOAT16;
}

int is_signed_int(ringlet_datatype_t dt) {
    return dt == RINGLET_INT8 || dt == RINGLET_INT32 || dt == RINGLET_INT64;
}

/* IEEE binary16 <-> binary32, round to nearest even */
uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = (float)man * 5.9604644775390625e-8f; /* man * 2^-24 */
        return sign ? -f : f;
    }
    uint32_t x = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    memcpy(&f, &x, 4);
    return f;
}

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Element access through memcpy: no aliasing questions, and the compiler turns it
 * into plain loads and stores. */
static void store_val(void *buf, ringlet_datatype_t dt, size_t i, int64_t v) {
    char *p = buf;
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: {
        uint8_t x = (uint8_t)(uint64_t)v;
        memcpy(p + i, &x, 1);
        break;
    }
    case RINGLET_INT32:
    case RINGLET_UINT32: {
        uint32_t x = (uint32_t)(uint64_t)v;
        memcpy(p + 4 * i, &x, 4);
        break;
    }
    case RINGLET_INT64:
    case RINGLET_UINT64: {
        uint64_t x = (uint64_t)v;
        memcpy(p + 8 * i, &x, 8);
        break;
    }
    case RINGLET_FLOAT16: {
        uint16_t x = f32_to_f16((float)v);
        memcpy(p + 2 * i, &x, 2);
        break;
    }
    case RINGLET_BFLOAT16: {
        uint16_t x = f32_to_bf16((float)v);
        memcpy(p + 2 * i, &x, 2);
        break;
    }
    case RINGLET_FLOAT32: {
        float x = (float)v;
        memcpy(p + 4 * i, &x, 4);
        break;
    }
    case RINGLET_FLOAT64: {
        double x = (double)v;
        memcpy(p + 8 * i, &x, 8);
        break;
    }
    default:
        break;
    }
}

/* raw bits of an integer element, zero-extended */
uint64_t load_bits(const void *buf, ringlet_datatype_t dt, size_t i) {
    const char *p = buf;
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: {
        uint8_t x;
        memcpy(&x, p + i, 1);
        return x;
    }
    case RINGLET_INT32:
    case RINGLET_UINT32: {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, p + 8 * i, 8);
        return x;
    }
    }
}

double load_double(const void *buf, ringlet_datatype_t dt, size_t i) {
    const char *p = buf;
    switch (dt) {
    case RINGLET_FLOAT16: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        return f16_to_f32(x);
    }
    case RINGLET_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        return bf16_to_f32(x);
    }
    case RINGLET_FLOAT32: {
        float x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    default: {
        double x;
        memcpy(&x, p + 8 * i, 8);
        return x;
    }
    }
}

/* ------------------------------------------------------------------------- */
/* deterministic input pattern                                               */

pattern_t make_pattern(ringlet_datatype_t dt, int has_op, ringlet_op_t op) {
    pattern_t p = {0, 1, 0, 0};
    int sgn = is_float(dt) || is_signed_int(dt);
    if (has_op && (op == RINGLET_SUM || op == RINGLET_AVG)) {
        p.lo = sgn ? -8 : 0;
        p.span = 17;
    } else if (has_op && op == RINGLET_PROD) {
        if (is_float(dt))
            p.prod_float = 1;
        else if (sgn)
            p.prod_sint = 1;
        else {
            p.lo = 1;
            p.span = 3;
        }
    } else {
        p.lo = sgn ? -100 : 0;
        p.span = 201;
    }
    return p;
}

void fill(void *buf, ringlet_datatype_t dt, const pattern_t *p, int rank, size_t first, size_t n) {
    if (dt == RINGLET_FLOAT32) { /* the common case, without store_val's switch per element */
        float *f = buf;
        for (size_t i = 0; i < n; i++) f[i] = (float)gen(p, rank, first + i);
        return;
    }
    for (size_t i = 0; i < n; i++) store_val(buf, dt, i, gen(p, rank, first + i));
}
