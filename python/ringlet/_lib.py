"""ctypes binding of libringlet (include/ringlet.h and include/ringlet_ddp.h).

The library is found, in this order:
  1. the RINGLET_LIBRARY environment variable (a path to libringlet.so, or a folder
     holding it; RINGLET_LIB is read too, its older name);
  2. the prefix recorded when `make install PREFIX=...` installed this package
     ($PREFIX/lib/python3.X/dist-packages/ringlet/_install.py names $PREFIX/lib);
  3. the loader's own search (ldconfig's cache, LD_LIBRARY_PATH);
  4. pkg-config's libdir of ringlet (`make install` writes $PREFIX/lib/pkgconfig/ringlet.pc;
     PKG_CONFIG_PATH finds a prefix of your own), for a copy installed by pip;
  5. $PREFIX/lib for the prefixes of this Python, /usr/local and /usr;
  6. the source tree's build/lib, when this package is used from a checkout built with `make`.
When none loads, the ImportError lists every place tried and why it failed.
"""
import ctypes
import ctypes.util
import os
import shutil
import subprocess

# ---- values of the C enums ----
SUCCESS = 0
ERR_CUDA = 1
ERR_SYSTEM = 2
ERR_INTERNAL = 3
ERR_INVALID_ARGUMENT = 4
ERR_INVALID_USAGE = 5
ERR_REMOTE = 6
IN_PROGRESS = 7
ERR_TIMEOUT = 8

INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
SUM, PROD, MAX, MIN, AVG = range(5)

DDP_HOST, DDP_DEVICE = 0, 1
DDP_NO_SYNC, DDP_SYNC, DDP_NO_GRAD = 0, 1, 2
DDP_COMPRESS_NONE, DDP_COMPRESS_FLOAT16, DDP_COMPRESS_BFLOAT16 = 0, 1, 2

c_comm = ctypes.c_void_p
c_req = ctypes.c_void_p
c_ddp = ctypes.c_void_p
c_result = ctypes.c_int


class DDPTensor(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("data", ctypes.c_void_p),
        ("grad", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("memory", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
    ]


class DDPOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("bucket_cap_bytes", ctypes.c_size_t),
        ("first_bucket_cap_bytes", ctypes.c_size_t),
        ("broadcast_buffers", ctypes.c_int),
        ("average_gradients", ctypes.c_int),
        ("find_unused_parameters", ctypes.c_int),
        ("gradient_as_bucket_view", ctypes.c_int),
        ("compression", ctypes.c_int),
        ("init_sync", ctypes.c_int),
        ("rebuild_buckets", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("init_only_buffers", ctypes.c_int),
    ]


class DDPBucketInfo(ctypes.Structure):
    _fields_ = [
        ("memory", ctypes.c_void_p),
        ("count", ctypes.c_size_t),
        ("dtype", ctypes.c_int),
        ("wire_dtype", ctypes.c_int),
        ("nparams", ctypes.c_int),
        ("first_param", ctypes.c_int),
        ("last_param", ctypes.c_int),
        ("launch_time", ctypes.c_double),
        ("complete_time", ctypes.c_double),
        ("done_time", ctypes.c_double),
    ]


class DDPStats(ctypes.Structure):
    _fields_ = [
        ("iterations", ctypes.c_uint64),
        ("finish_start_time", ctypes.c_double),
        ("finish_end_time", ctypes.c_double),
        ("buckets_before_finish", ctypes.c_int),
        ("buffer_broadcasts", ctypes.c_uint64),
        ("bucket_rebuilds", ctypes.c_uint64),
    ]


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class CommConfig(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("timeout_s", ctypes.c_double)]


def _recorded_libdir():
    """$PREFIX/lib as `make install` recorded it next to this file (None elsewhere)."""
    try:
        from . import _install  # written by `make install`; absent in the source tree and from pip
    except ImportError:
        return None
    return getattr(_install, "LIBDIR", None)


def _pkg_config_libdir():
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "ringlet"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def _candidates():
    env = os.environ.get("RINGLET_LIBRARY") or os.environ.get("RINGLET_LIB")
    if env:
        if os.path.isdir(env):
            yield os.path.join(env, "libringlet.so")
        else:
            yield env
        return
    libdir = _recorded_libdir()
    if libdir:
        yield os.path.join(libdir, "libringlet.so.0")
    # the loader's own search (ldconfig, LD_LIBRARY_PATH)
    yield "libringlet.so.0"
    found = ctypes.util.find_library("ringlet")
    if found and found != "libringlet.so.0":
        yield found
    libdir = _pkg_config_libdir()
    if libdir:
        yield os.path.join(libdir, "libringlet.so.0")
    else:
        yield "pkg-config ringlet"  # reported as tried, not loaded
    import sys
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix, "/usr/local", "/usr")):
        yield os.path.join(prefix, "lib", "libringlet.so.0")
    # the source tree (this package used from a checkout built with `make`)
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.normpath(os.path.join(here, "..", "..", "build", "lib", "libringlet.so"))


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p), ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p)]


def _file_of(loaded, path):
    """The file the loader took for path (a soname such as libringlet.so.0 is found on the
    loader's own path): dladdr of one of its functions; path itself where that fails."""
    if os.path.sep in path:
        return path
    try:
        libc = ctypes.CDLL(None)
        info = _DlInfo()
        fn = ctypes.cast(loaded.ringlet_version, ctypes.c_void_p)
        if libc.dladdr(fn, ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (OSError, AttributeError):
        pass
    return path


def _load():
    errors = []
    for path in _candidates():
        if path == "pkg-config ringlet":
            errors.append("pkg-config ringlet: %s" % ("no ringlet.pc on its path (PKG_CONFIG_PATH)"
                                                      if shutil.which("pkg-config") else "no pkg-config"))
            continue
        if os.path.sep in path and not os.path.exists(path):
            errors.append("%s: not found" % path)
            continue
        try:
            candidate = ctypes.CDLL(path)
        except OSError as e:
            errors.append("%s: %s" % (path, e))
            continue
        missing = [name for name, _, _ in _PROTOS if not hasattr(candidate, name)]
        if missing:  # another build, older than this package: passed over for a later candidate
            errors.append("%s: lacks %s%s (a build older than this package?)"
                          % (path, missing[0], " and %d more" % (len(missing) - 1) if len(missing) > 1 else ""))
            continue
        for name, restype, argtypes in _PROTOS:
            f = getattr(candidate, name)
            f.restype = restype
            f.argtypes = argtypes
        return candidate, _file_of(candidate, path)
    raise ImportError(
        "ringlet: cannot load libringlet; tried, in order: " + "; ".join(errors)
        + ". Set RINGLET_LIBRARY to the path of libringlet.so, install it (make install), or build the "
        "source tree (make)"
    )


_SZ = ctypes.c_size_t
_I = ctypes.c_int
_P = ctypes.c_void_p
_PROTOS = []  # (name, restype, argtypes) of every C function the package calls


def _proto(name, restype, *argtypes):
    _PROTOS.append((name, restype, list(argtypes)))


_proto("ringlet_strerror", ctypes.c_char_p, c_result)
_proto("ringlet_comm_last_error", ctypes.c_char_p, c_comm)
_proto("ringlet_datatype_size", _SZ, _I)
_proto("ringlet_version", ctypes.c_char_p)
_proto("ringlet_comm_init_env", c_result, ctypes.POINTER(c_comm))
_proto("ringlet_get_unique_id", c_result, ctypes.POINTER(UniqueId))
_proto("ringlet_comm_init_rank", c_result, ctypes.POINTER(c_comm), _I, UniqueId, _I)
_proto("ringlet_comm_init_rank_config", c_result, ctypes.POINTER(c_comm), _I, UniqueId, _I, ctypes.POINTER(CommConfig))
_proto("ringlet_comm_split", c_result, c_comm, _I, _I, ctypes.POINTER(c_comm))
_proto("ringlet_comm_finalize", c_result, c_comm)
_proto("ringlet_group_start", c_result)
_proto("ringlet_group_end", c_result)
_proto("ringlet_comm_destroy", c_result, c_comm)
_proto("ringlet_comm_abort", c_result, c_comm)
for _q in ("rank", "size", "local_rank", "local_size"):
    _proto("ringlet_comm_" + _q, c_result, c_comm, ctypes.POINTER(_I))
_proto("ringlet_comm_get_async_error", c_result, c_comm)

_proto("ringlet_allreduce", c_result, _P, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_broadcast", c_result, _P, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_reduce", c_result, _P, _P, _SZ, _I, _I, _I, c_comm, _P)
_proto("ringlet_allgather", c_result, _P, _P, _SZ, _I, c_comm, _P)
_proto("ringlet_reduce_scatter", c_result, _P, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_barrier", c_result, c_comm, _P)
_proto("ringlet_send", c_result, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_recv", c_result, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_alltoall", c_result, _P, _P, _SZ, _I, c_comm, _P)
_proto("ringlet_gather", c_result, _P, _P, _SZ, _I, _I, c_comm, _P)
_proto("ringlet_scatter", c_result, _P, _P, _SZ, _I, _I, c_comm, _P)
_RQ = ctypes.POINTER(c_req)
_proto("ringlet_iallreduce", c_result, _P, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_ibroadcast", c_result, _P, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_ireduce", c_result, _P, _P, _SZ, _I, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_iallgather", c_result, _P, _P, _SZ, _I, c_comm, _P, _RQ)
_proto("ringlet_ireduce_scatter", c_result, _P, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_ibarrier", c_result, c_comm, _P, _RQ)
_proto("ringlet_isend", c_result, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_irecv", c_result, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_ialltoall", c_result, _P, _P, _SZ, _I, c_comm, _P, _RQ)
_proto("ringlet_igather", c_result, _P, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_iscatter", c_result, _P, _P, _SZ, _I, _I, c_comm, _P, _RQ)
_proto("ringlet_test", c_result, _RQ, ctypes.POINTER(_I))
_proto("ringlet_wait", c_result, _RQ)

_proto("ringlet_ddp_options_init", None, ctypes.POINTER(DDPOptions))
_proto("ringlet_ddp_create", c_result, ctypes.POINTER(c_ddp), c_comm, ctypes.POINTER(DDPTensor), _I,
       ctypes.POINTER(DDPTensor), _I, ctypes.POINTER(DDPOptions))
_proto("ringlet_ddp_destroy", c_result, c_ddp)
_proto("ringlet_ddp_last_error", ctypes.c_char_p, c_ddp)
_proto("ringlet_ddp_pre_forward", c_result, c_ddp, _I)
_proto("ringlet_ddp_broadcast_buffers", c_result, c_ddp)
_proto("ringlet_ddp_set_buffer", c_result, c_ddp, _I, _P)
_proto("ringlet_ddp_grad_ready", c_result, c_ddp, _I, _P)
_proto("ringlet_ddp_grad_unused", c_result, c_ddp, _I, _P)
_proto("ringlet_ddp_grad_failed", c_result, c_ddp, _I, ctypes.c_char_p)
_proto("ringlet_ddp_finish", c_result, c_ddp)
_proto("ringlet_ddp_grad_view", c_result, c_ddp, _I, ctypes.POINTER(_P))
_proto("ringlet_ddp_free_retired", c_result, c_ddp, ctypes.POINTER(ctypes.c_size_t))
_proto("ringlet_ddp_param_used", c_result, c_ddp, _I, ctypes.POINTER(_I))
_proto("ringlet_ddp_num_buckets", c_result, c_ddp, ctypes.POINTER(_I))
_proto("ringlet_ddp_param_bucket", c_result, c_ddp, _I, ctypes.POINTER(_I), ctypes.POINTER(_SZ))
_proto("ringlet_ddp_bucket_info", c_result, c_ddp, _I, ctypes.POINTER(DDPBucketInfo))
_proto("ringlet_ddp_stats", c_result, c_ddp, ctypes.POINTER(DDPStats))
_proto("ringlet_ddp_set_stream", c_result, c_ddp, _P)

# The first candidate that loads and has every function above (one that lacks some, an
# older build on the loader's path, is passed over, said in the error if none fits).
lib, path = _load()


def strerror(rc):
    return lib.ringlet_strerror(rc).decode("utf-8", "replace")
