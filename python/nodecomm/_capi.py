"""ctypes bindings for libnodecomm's C API (client/include/nodecomm.h).

Only this module knows the C signatures. Everything is declared with explicit argtypes and
restype so that a wrong call fails in Python instead of corrupting memory.

ctypes.CDLL releases the GIL around every foreign call, so a thread blocked in nc_wait does not
stop other Python threads. nc_last_error() is per OS thread: it must be read by the thread that
got the failing status, right after the call (raise_for_status does exactly that).
"""

import ctypes
import ctypes.util
import os

# Status codes (nc_status_t).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_OUT_OF_RANGE = 2
ERR_UNSUPPORTED = 3
ERR_MISMATCH = 4
ERR_PEER_LOST = 5
ERR_DAEMON_LOST = 6
ERR_TIMEOUT = 7
ERR_QUEUE_FULL = 8
ERR_NO_MEMORY = 9
ERR_NOT_INITIALIZED = 10
ERR_PROTOCOL = 11
ERR_PERMISSION = 12
ERR_INTERNAL = 13
IN_PROGRESS = 14

# Element types (nc_dtype_t), keyed by the names nc_dtype_name() uses.
DTYPES = {"f32": 0, "f64": 1, "i32": 2, "i64": 3, "f16": 4, "bf16": 5, "i8": 6, "u8": 7}
DTYPE_SIZES = {"f32": 4, "f64": 8, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "i8": 1, "u8": 1}
# Reduction operations (nc_redop_t).
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4}
# Wire compression (nc_compress_t).
COMPRESS = {"none": 0, "bf16": 1, "f16": 2, "int8": 3}

COMM_WORLD = 0

context_p = ctypes.c_void_p
request_t = ctypes.c_uint64
status_t = ctypes.c_int


class InitOptions(ctypes.Structure):
    _fields_ = [
        ("runtime_dir", ctypes.c_char_p),
        ("instance", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("local_rank", ctypes.c_int32),
        ("local_size", ctypes.c_int32),
        ("arena_bytes", ctypes.c_uint64),
        ("timeout_sec", ctypes.c_double),
    ]


class OpAttr(ctypes.Structure):
    _fields_ = [
        ("priority", ctypes.c_int32),
        ("name", ctypes.c_char_p),
        ("compress", ctypes.c_int),
    ]


class Error(RuntimeError):
    """A nodecomm call failed.

    Attributes: ``status`` (the nc_status_t value), ``status_name`` (nc_status_string, e.g.
    "mismatched collective"), ``daemon_message`` (nc_last_error() of the failing call: the
    library's or the daemon's own words, naming operation, rank and sequence number) and
    ``context`` (what the Python side was doing: rank, collective, tensor name).
    """

    def __init__(self, status, daemon_message, context=""):
        self.status = int(status)
        self.status_name = status_string(self.status)
        self.daemon_message = daemon_message
        self.context = context
        where = f"{context}: " if context else ""
        super().__init__(f"{where}{self.status_name} ({self.status}): {daemon_message}")


def _candidate_paths():
    """Where libnodecomm may be, best first."""
    override = os.environ.get("NODECOMM_LIBRARY")
    if override:
        yield override
    try:
        from . import _libpath  # written by CMake: the build tree's or the installed library

        yield _libpath.LIBRARY
    except ImportError:
        pass
    found = ctypes.util.find_library("nodecomm")
    if found:
        yield found
    yield "libnodecomm.so.0"


def _load():
    errors = []
    for path in _candidate_paths():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError(
        "nodecomm: cannot load libnodecomm (set NODECOMM_LIBRARY to its path); tried "
        + "; ".join(errors)
    )


lib, LIBRARY_PATH = _load()


def _declare(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_P = ctypes.c_void_p
_SZ = ctypes.c_size_t
_ATTR = ctypes.POINTER(OpAttr)
_REQ = ctypes.POINTER(request_t)

nc_init_options_default = _declare("nc_init_options_default", None, ctypes.POINTER(InitOptions))
nc_init = _declare("nc_init", status_t, ctypes.POINTER(InitOptions), ctypes.POINTER(context_p))
nc_finalize = _declare("nc_finalize", status_t, context_p)
nc_world_rank = _declare("nc_world_rank", ctypes.c_int, context_p)
nc_world_size = _declare("nc_world_size", ctypes.c_int, context_p)
nc_node_index = _declare("nc_node_index", ctypes.c_int, context_p)
nc_node_count = _declare("nc_node_count", ctypes.c_int, context_p)
nc_local_rank = _declare("nc_local_rank", ctypes.c_int, context_p)
nc_local_size = _declare("nc_local_size", ctypes.c_int, context_p)
nc_alloc = _declare("nc_alloc", status_t, context_p, _SZ, ctypes.POINTER(_P))
nc_free = _declare("nc_free", status_t, context_p, _P)
nc_register_fd = _declare("nc_register_fd", status_t, context_p, ctypes.c_int, ctypes.c_uint64,
                          _SZ, _P)
nc_arena_info = _declare(
    "nc_arena_info", status_t, context_p, ctypes.POINTER(ctypes.c_uint64),
    ctypes.POINTER(ctypes.c_uint64))
nc_allreduce = _declare(
    "nc_allreduce", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_int,
    ctypes.c_uint32, _ATTR, _REQ)
nc_reduce = _declare(
    "nc_reduce", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_int, ctypes.c_int,
    ctypes.c_uint32, _ATTR, _REQ)
nc_broadcast = _declare(
    "nc_broadcast", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_int,
    ctypes.c_uint32, _ATTR, _REQ)
nc_reduce_scatter = _declare(
    "nc_reduce_scatter", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_int,
    ctypes.c_uint32, _ATTR, _REQ)
nc_allgather = _declare(
    "nc_allgather", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_uint32, _ATTR,
    _REQ)
nc_alltoall = _declare(
    "nc_alltoall", status_t, context_p, _P, _P, _SZ, ctypes.c_int, ctypes.c_uint32, _ATTR,
    _REQ)
nc_barrier = _declare("nc_barrier", status_t, context_p, ctypes.c_uint32, _ATTR, _REQ)
nc_test = _declare("nc_test", status_t, context_p, request_t)
nc_wait = _declare("nc_wait", status_t, context_p, request_t)
nc_last_error = _declare("nc_last_error", ctypes.c_char_p)
nc_status_string = _declare("nc_status_string", ctypes.c_char_p, status_t)


def last_error():
    """nc_last_error() of the calling thread, decoded."""
    raw = nc_last_error()
    return raw.decode("utf-8", "replace") if raw else ""


def status_string(status):
    raw = nc_status_string(int(status))
    return raw.decode("utf-8", "replace") if raw else f"status {status}"


def raise_for_status(status, context):
    """Raises Error for any status but OK; call it right after the C call, in the same thread."""
    if status != OK:
        raise Error(status, last_error(), context)
