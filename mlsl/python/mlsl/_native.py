"""libmlsl loaded through ctypes: the C signatures of mlsl.h and the argument conversions that
every wrapper of mlsl.py shares. Internal to the mlsl package."""

import ctypes
import logging
import os
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_ulonglong, c_void_p

_log = logging.getLogger("mlsl")


class Error(RuntimeError):
    """A libmlsl C call returned CMLSL_FAILURE (its reason is on stderr), or the module's own
    bookkeeping (init/finalize counts) was misused."""


Error.__module__ = "mlsl"  # tracebacks name the package's export, not this internal module


_H = c_ulonglong  # every handle type of mlsl.h
_SZ = c_size_t
_P = POINTER
_VP = c_void_p
_ULL = c_ulonglong

# mlsl_<name> -> argument types; every function returns int (CMLSL_SUCCESS / CMLSL_FAILURE).
_SIGNATURES = {
    "comm_block_info_get_mb_offset": [_H, _P(_SZ)],
    "comm_block_info_get_mb_count": [_H, _P(_SZ)],
    "comm_block_info_get_fm_offset": [_H, _P(_SZ)],
    "comm_block_info_get_fm_count": [_H, _P(_SZ)],
    "comm_block_info_get_fm_size": [_H, _P(_SZ)],
    "comm_block_info_get_data_type": [_H, _P(c_int)],
    "comm_block_info_get_buf_offset": [_H, _P(_SZ)],
    "activation_get_global_fm_count": [_H, _P(_SZ)],
    "activation_get_global_fm_offset": [_H, _P(_SZ)],
    "activation_get_local_fm_count": [_H, _P(_SZ)],
    "activation_get_pack_block_count": [_H, _P(_SZ)],
    "activation_get_unpack_block_count": [_H, _P(_SZ)],
    "activation_get_pack_block": [_H, _SZ, _P(_H)],
    "activation_get_unpack_block": [_H, _SZ, _P(_H)],
    "activation_get_data_type": [_H, _P(c_int)],
    "activation_get_fm_size": [_H, _P(_SZ)],
    "activation_get_comm_buf": [_H, _P(_VP)],
    "activation_get_comm_buf_size": [_H, _P(_SZ)],
    "activation_start_comm": [_H, _VP],
    "activation_wait_comm": [_H, _P(_VP)],
    "parameter_set_get_global_kernel_count": [_H, _P(_SZ)],
    "parameter_set_get_global_kernel_offset": [_H, _P(_SZ)],
    "parameter_set_get_local_kernel_count": [_H, _P(_SZ)],
    "parameter_set_get_owned_kernel_count": [_H, _P(_SZ)],
    "parameter_set_get_owned_kernel_offset": [_H, _P(_SZ)],
    "parameter_set_get_data_type": [_H, _P(c_int)],
    "parameter_set_get_kernel_size": [_H, _P(_SZ)],
    "parameter_set_is_distributed_update": [_H, _P(c_int)],
    "parameter_set_start_gradient_comm": [_H, _VP],
    "parameter_set_start_increment_comm": [_H, _VP],
    "parameter_set_wait_gradient_comm": [_H, _P(_VP)],
    "parameter_set_test_gradient_comm": [_H, _P(c_int), _P(_VP)],
    "parameter_set_wait_increment_comm": [_H, _P(_VP)],
    "distribution_get_process_count": [_H, c_int, _P(_SZ)],
    "distribution_get_process_idx": [_H, c_int, _P(_SZ)],
    "distribution_bcast": [_H, _VP, _SZ, c_int, _SZ, c_int, _P(_H)],
    "distribution_reduce": [_H, _VP, _VP, _SZ, c_int, c_int, _SZ, c_int, _P(_H)],
    "distribution_all_reduce": [_H, _VP, _VP, _SZ, c_int, c_int, c_int, _P(_H)],
    "distribution_all_to_all": [_H, _VP, _SZ, _VP, c_int, c_int, _P(_H)],
    "distribution_all_to_allv": [_H, _VP, _P(_SZ), _P(_SZ), _VP, _P(_SZ), _P(_SZ), c_int, c_int,
                                 _P(_H)],
    "distribution_gather": [_H, _VP, _SZ, _VP, c_int, _SZ, c_int, _P(_H)],
    "distribution_all_gather": [_H, _VP, _SZ, _VP, c_int, c_int, _P(_H)],
    "distribution_all_gatherv": [_H, _VP, _SZ, _VP, _P(_SZ), c_int, c_int, _P(_H)],
    "distribution_scatter": [_H, _VP, _VP, _SZ, c_int, _SZ, c_int, _P(_H)],
    "distribution_reduce_scatter": [_H, _VP, _VP, _SZ, c_int, c_int, c_int, _P(_H)],
    "distribution_barrier": [_H, c_int],
    "operation_reg_info_set_name": [_H, c_char_p],
    "operation_reg_info_add_input": [_H, _SZ, _SZ, c_int],
    "operation_reg_info_add_output": [_H, _SZ, _SZ, c_int],
    "operation_reg_info_add_parameter_set": [_H, _SZ, _SZ, c_int, c_int],
    "operation_reg_info_add_parameter_set_with_compress": [_H, _SZ, _SZ, c_int, c_int, c_int],
    "operation_reg_info_validate": [_H, _H],
    "operation_set_distribution": [_H, _H],
    "operation_get_distribution": [_H, _P(_H)],
    "operation_get_session": [_H, _P(_H)],
    "operation_get_op_type": [_H, _P(c_int)],
    "operation_set_prev": [_H, _H, _SZ, _SZ],
    "operation_set_next": [_H, _H, _SZ, _SZ],
    "operation_get_name": [_H, _P(c_char_p)],
    "operation_get_global_minibatch_size": [_H, _P(_SZ)],
    "operation_get_local_minibatch_size": [_H, _P(_SZ)],
    "operation_get_global_minibatch_offset": [_H, _P(_SZ)],
    "operation_get_input_count": [_H, _P(_SZ)],
    "operation_get_input": [_H, _SZ, _P(_H)],
    "operation_get_output_count": [_H, _P(_SZ)],
    "operation_get_output": [_H, _SZ, _P(_H)],
    "operation_has_parameter_sets": [_H, _P(c_int)],
    "operation_get_parameter_set_count": [_H, _P(_SZ)],
    "operation_get_parameter_set": [_H, _SZ, _P(_H)],
    "statistics_start": [_H],
    "statistics_stop": [_H],
    "statistics_reset": [_H],
    "statistics_print": [_H],
    "statistics_is_started": [_H, _P(c_int)],
    "statistics_is_enabled": [_H, _P(c_int)],
    "statistics_get_isolation_comm_cycles": [_H, _SZ, _P(_ULL)],
    "statistics_get_comm_size": [_H, _SZ, _P(_SZ)],
    "statistics_get_comm_cycles": [_H, _SZ, _P(_ULL)],
    "statistics_get_compute_cycles": [_H, _SZ, _P(_ULL)],
    "statistics_get_total_isolation_comm_cycles": [_H, _P(_ULL)],
    "statistics_get_total_comm_size": [_H, _P(_SZ)],
    "statistics_get_total_comm_cycles": [_H, _P(_ULL)],
    "statistics_get_total_compute_cycles": [_H, _P(_ULL)],
    "session_set_global_minibatch_size": [_H, _SZ],
    "session_get_global_minibatch_size": [_H, _P(_SZ)],
    "session_get_phase_type": [_H, _P(c_int)],
    "session_create_operation_reg_info": [_H, c_int, _P(_H)],
    "session_delete_operation_reg_info": [_H, _H],
    "session_add_operation_with_distribution": [_H, _H, _H, _P(_SZ)],
    "session_add_operation": [_H, _H, _P(_SZ)],
    "session_remove_operations": [_H],
    "session_get_operation_count": [_H, _P(_SZ)],
    "session_get_operation": [_H, _SZ, _P(_H)],
    "session_commit": [_H],
    "session_get_stats": [_H, _P(_H)],
    "environment_get_env": [_P(_H)],
    "environment_get_version": [_P(c_int)],
    "environment_configure": [_H, c_char_p],
    "environment_init": [_H, _P(c_int), _P(_P(c_char_p))],
    "environment_finalize": [_H],
    "environment_is_initialized": [_H, _P(c_int)],
    "environment_get_process_idx": [_H, _P(_SZ)],
    "environment_get_process_count": [_H, _P(_SZ)],
    "environment_create_session": [_H, c_int, _P(_H)],
    "environment_delete_session": [_H, _H],
    "environment_create_distribution": [_H, _SZ, _SZ, _P(_H)],
    "environment_create_distribution_with_colors": [_H, c_int, c_int, _P(_H)],
    "environment_delete_distribution": [_H, _H],
    "environment_wait": [_H, _H],
    "environment_test": [_H, _H, _P(c_int)],
    "environment_alloc": [_H, _SZ, _SZ, _P(_VP)],
    "environment_free": [_H, _VP],
    # The C API takes the struct's address itself, cast to mlsl_quant_params* (mlsl.h).
    "environment_set_quantization_params": [_H, _VP],
    "environment_get_quantization_params": [_H, _P(_H)],
}


class _Library:
    """libmlsl, loaded on first use, and the environment handle."""

    dll = None
    path = None
    fns = {}
    env = 0


def _candidate_paths():
    override = os.environ.get("MLSL_LIBRARY")
    if override:
        # An explicit choice: falling back to another library would hide the mistake.
        yield override
        return
    try:
        from . import _libpath  # written by CMake: the build tree's or the installed library

        yield _libpath.LIBRARY
    except ImportError:
        pass
    yield "libmlsl.so.1"


def _load():
    if _Library.dll is not None:
        return
    errors = []
    for path in _candidate_paths():
        try:
            dll = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise ImportError("mlsl: cannot load libmlsl (set MLSL_LIBRARY to its path); tried "
                          + "; ".join(errors))
    fns = {}
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(dll, "mlsl_" + name)
        fn.argtypes = argtypes
        fn.restype = c_int
        fns[name] = fn
    _Library.dll, _Library.path, _Library.fns = dll, path, fns
    env = _H()
    _call("environment_get_env", byref(env))
    _Library.env = env.value
    _log.debug("libmlsl loaded from %s", path)


def _call(name, *args):
    if _Library.fns[name](*args) != 0:
        raise Error(f"mlsl_{name} failed (libmlsl printed the reason on stderr)")


def _get(name, ctype, *args):
    """Calls mlsl_<name>(*args, &out) and returns out.value."""
    out = ctype()
    _call(name, *args, byref(out))
    return out.value


def _address(buf, what="buffer"):
    """The address of a buffer argument, or None for NULL."""
    if buf is None:
        return None
    if isinstance(buf, int):
        return buf
    if isinstance(buf, c_void_p):
        return buf.value
    if isinstance(buf, ctypes._Pointer):
        return ctypes.cast(buf, c_void_p).value
    if isinstance(buf, (ctypes.Array, ctypes.Structure, ctypes.Union, ctypes._SimpleCData)):
        return ctypes.addressof(buf)
    iface = getattr(buf, "__array_interface__", None)
    if iface is not None:
        # Read-only arrays are accepted (send buffers), so only the layout is checked here.
        if not memoryview(buf).c_contiguous:
            raise ValueError(f"{what}: numpy array must be C-contiguous")
        return iface["data"][0]
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(f"{what}: expected c_void_p, an int address, a ctypes object, a numpy "
                        f"array or a writable buffer, not {type(buf).__name__}") from None
    if view.readonly or not view.c_contiguous:
        raise ValueError(f"{what}: buffer must be writable and C-contiguous")
    if view.nbytes == 0:
        return None
    return ctypes.addressof((ctypes.c_char * view.nbytes).from_buffer(view.cast("B")))


def _sizes(values, what):
    """A size_t[] for counts/offsets: from a sequence, a numpy array or a ctypes array."""
    if isinstance(values, ctypes.Array) and values._type_ is c_size_t:
        return values
    try:
        return (c_size_t * len(values))(*[int(v) for v in values])
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of counts, not "
                        f"{type(values).__name__}") from None


def _void_or_none(value):
    return c_void_p(value) if value else None
