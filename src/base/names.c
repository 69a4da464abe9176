#include "names.h"

size_t ringlet_datatype_size(ringlet_datatype_t d) {
    static const size_t sz[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return (unsigned)d < RINGLET_NUM_DATATYPES ? sz[d] : 0;
}

const char *rl_dtype_name(ringlet_datatype_t d) {
    static const char *const names[RINGLET_NUM_DATATYPES] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                                             "uint64", "float16", "float32", "float64", "bfloat16"};
    return (unsigned)d < RINGLET_NUM_DATATYPES ? names[d] : "?";
}

const char *rl_redop_name(ringlet_op_t op) {
    static const char *const names[RINGLET_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
    return (unsigned)op < RINGLET_NUM_OPS ? names[op] : "?";
}

const char *ringlet_strerror(ringlet_result_t r) {
    switch (r) {
    case RINGLET_SUCCESS: return "success";
    case RINGLET_ERR_CUDA: return "CUDA error";
    case RINGLET_ERR_SYSTEM: return "system error";
    case RINGLET_ERR_INTERNAL: return "internal error";
    case RINGLET_ERR_INVALID_ARGUMENT: return "invalid argument";
    case RINGLET_ERR_INVALID_USAGE: return "invalid usage";
    case RINGLET_ERR_REMOTE: return "remote error (a peer failed)";
    case RINGLET_IN_PROGRESS: return "in progress";
    case RINGLET_ERR_TIMEOUT: return "timeout";
    default: return "unknown result code";
    }
}
