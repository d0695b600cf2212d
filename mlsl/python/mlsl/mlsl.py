"""The Intel MLSL 1.0 Python API over nodecomm's libmlsl: ctypes over mlsl.h.

Names and call shapes are MLSL's (``mlsl.MLSL()``, ``create_session``, ``all_reduce``, ...), so
scripts written for MLSL's module run unchanged; differences:

* every C call's status is checked and a failure raises :class:`Error` (a RuntimeError); the
  library prints its reason on stderr. Misuse that MLSL treats as fatal still ends the process;
* the library is the one this module was built or installed with (``_libpath.py``), or
  ``MLSL_LIBRARY=/path/to/libmlsl.so.1``; ``MLSL_ROOT`` and ``LD_LIBRARY_PATH`` are not searched;
* ``get_version()`` works (it takes no environment handle in C);
* extensions: ``Distribution.all_gatherv``, ``MLSL.create_distribution_with_colors``,
  ``add_parameter_set(..., compress_type=CompressionType.NONE)``, ``DataType.BYTE``,
  ``CompressionType``, ``QuantParams`` with ``set_quantization_params`` /
  ``get_quantization_params``; ``add_input`` / ``add_output`` / ``add_parameter_set`` return
  the new index; ``Statistics.print`` beside MLSL's ``dump``.

Buffers may be given as ``ctypes.c_void_p``, an int address, a ctypes array or object, a numpy
array (C-contiguous; its ``arr.ctypes.data``) or a writable buffer such as a bytearray. The
caller keeps them alive until the exchange that uses them is waited.

A process uses either this module or the ``nodecomm`` package for collectives, not both: each
attaches to the node's daemon on its own.
"""

import ctypes
import logging
import os
from ctypes import POINTER, byref, c_char_p, c_int, c_size_t, c_ulonglong, c_void_p

from ._native import (_H, _SZ, _ULL, _VP, Error, _address, _call, _get, _Library, _load, _log,
                      _sizes, _void_or_none)


class DataType:
    FLOAT = 0
    DOUBLE = 1
    BYTE = 2  # nodecomm extension (mlsl.hpp has it; MLSL's Python module did not)


class PhaseType:
    TRAIN = 0
    TEST = 1


class GroupType:
    DATA = 0
    MODEL = 1
    GLOBAL = 2


class ReductionType:
    SUM = 0
    MIN = 1
    MAX = 2


class OperationType:
    CC = 0
    BIAS = 1
    ACT = 2
    POOL = 3
    SPLIT = 4
    CONCAT = 5
    BCAST = 6
    REDUCE = 7
    DATA = 8
    EVAL = 9


class CompressionType:  # nodecomm extension
    NONE = 0
    QUANTIZATION = 1


class QuantParams(ctypes.Structure):
    """MLSL::QuantParams, for set_quantization_params (nodecomm extension). nodecomm keeps a
    copy but does not load lib_path: CT_QUANTIZATION selects the daemon's wire compression."""

    _fields_ = [
        ("lib_path", c_char_p),
        ("quant_buffer_func_name", c_char_p),
        ("dequant_buffer_func_name", c_char_p),
        ("reduce_sum_func_name", c_char_p),
        ("block_size", c_size_t),
        ("elem_in_block", c_size_t),
    ]


# ---- objects ----


def _handle(obj):
    """The integer handle of a wrapper, a c_ulonglong, an int or None (0)."""
    if obj is None:
        return 0
    if isinstance(obj, _Object):
        return obj.get_handle()
    if isinstance(obj, ctypes._SimpleCData):
        return obj.value or 0
    return int(obj)


class _Object:
    """An object of the library, named by its handle (its address in libmlsl)."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = _handle(handle)

    def get_handle(self):
        return self._handle

    def __eq__(self, other):
        return type(self) is type(other) and self._handle == other._handle

    def __hash__(self):
        return hash((type(self).__name__, self._handle))

    def __repr__(self):
        return f"<mlsl.{type(self).__name__.lstrip('_')} 0x{self._handle:x}>"


def _wrap(cls, handle):
    return cls(handle) if handle else None


class _CommBlockInfo(_Object):
    def get_mb_offset(self):
        return _get("comm_block_info_get_mb_offset", _SZ, self._handle)

    def get_mb_count(self):
        return _get("comm_block_info_get_mb_count", _SZ, self._handle)

    def get_fm_offset(self):
        return _get("comm_block_info_get_fm_offset", _SZ, self._handle)

    def get_fm_count(self):
        return _get("comm_block_info_get_fm_count", _SZ, self._handle)

    def get_fm_size(self):
        return _get("comm_block_info_get_fm_size", _SZ, self._handle)

    def get_data_type(self):
        return _get("comm_block_info_get_data_type", c_int, self._handle)

    def get_buf_offset(self):
        return _get("comm_block_info_get_buf_offset", _SZ, self._handle)


class _Activation(_Object):
    def get_global_fm_count(self):
        return _get("activation_get_global_fm_count", _SZ, self._handle)

    def get_global_fm_offset(self):
        return _get("activation_get_global_fm_offset", _SZ, self._handle)

    def get_local_fm_count(self):
        return _get("activation_get_local_fm_count", _SZ, self._handle)

    def get_pack_block_count(self):
        return _get("activation_get_pack_block_count", _SZ, self._handle)

    def get_unpack_block_count(self):
        return _get("activation_get_unpack_block_count", _SZ, self._handle)

    def get_pack_block(self, block_idx):
        return _CommBlockInfo(_get("activation_get_pack_block", _H, self._handle, block_idx))

    def get_unpack_block(self, block_idx):
        return _CommBlockInfo(_get("activation_get_unpack_block", _H, self._handle, block_idx))

    def get_data_type(self):
        return _get("activation_get_data_type", c_int, self._handle)

    def get_fm_size(self):
        return _get("activation_get_fm_size", _SZ, self._handle)

    def get_comm_buf(self):
        """The library's buffer as c_void_p (its value None when this side sends nothing)."""
        return c_void_p(_get("activation_get_comm_buf", _VP, self._handle))

    def get_comm_buf_size(self):
        return _get("activation_get_comm_buf_size", _SZ, self._handle)

    def start_comm(self, buf):
        _call("activation_start_comm", self._handle, _address(buf, "start_comm buf"))

    def wait_comm(self):
        """c_void_p of the buffer to unpack from (its value None when there is nothing)."""
        return c_void_p(_get("activation_wait_comm", _VP, self._handle))


class _ParameterSet(_Object):
    def get_global_kernel_count(self):
        return _get("parameter_set_get_global_kernel_count", _SZ, self._handle)

    def get_global_kernel_offset(self):
        return _get("parameter_set_get_global_kernel_offset", _SZ, self._handle)

    def get_local_kernel_count(self):
        return _get("parameter_set_get_local_kernel_count", _SZ, self._handle)

    def get_owned_kernel_count(self):
        return _get("parameter_set_get_owned_kernel_count", _SZ, self._handle)

    def get_owned_kernel_offset(self):
        return _get("parameter_set_get_owned_kernel_offset", _SZ, self._handle)

    def get_data_type(self):
        return _get("parameter_set_get_data_type", c_int, self._handle)

    def get_kernel_size(self):
        return _get("parameter_set_get_kernel_size", _SZ, self._handle)

    def is_distributed_update(self):
        return _get("parameter_set_is_distributed_update", c_int, self._handle) != 0

    def start_gradient_comm(self, buf):
        _call("parameter_set_start_gradient_comm", self._handle,
              _address(buf, "start_gradient_comm buf"))

    def wait_gradient_comm(self):
        """c_void_p of the summed gradients (the owned part with distributed update), or
        None."""
        return _void_or_none(_get("parameter_set_wait_gradient_comm", _VP, self._handle))

    def test_gradient_comm(self):
        """(c_void_p or None, completed)."""
        done = c_int()
        result = c_void_p()
        _call("parameter_set_test_gradient_comm", self._handle, byref(done), byref(result))
        return _void_or_none(result.value), done.value != 0

    def start_increment_comm(self, buf):
        _call("parameter_set_start_increment_comm", self._handle,
              _address(buf, "start_increment_comm buf"))

    def wait_increment_comm(self):
        return _void_or_none(_get("parameter_set_wait_increment_comm", _VP, self._handle))


class _Distribution(_Object):
    def get_process_count(self, group_type):
        return _get("distribution_get_process_count", _SZ, self._handle, group_type)

    def get_process_idx(self, group_type):
        return _get("distribution_get_process_idx", _SZ, self._handle, group_type)

    def _post(self, name, *args):
        req = c_ulonglong()
        _call(name, self._handle, *args, byref(req))
        return req

    # Each collective returns the request (c_ulonglong) for MLSL.wait / MLSL.test.

    def bcast(self, buf, count, data_type, root_idx, group_type):
        return self._post("distribution_bcast", _address(buf), count, data_type, root_idx,
                          group_type)

    def reduce(self, send_buf, recv_buf, count, data_type, red_type, root_idx, group_type):
        return self._post("distribution_reduce", _address(send_buf, "send_buf"),
                          _address(recv_buf, "recv_buf"), count, data_type, red_type, root_idx,
                          group_type)

    def all_reduce(self, send_buf, recv_buf, count, data_type, red_type, group_type):
        return self._post("distribution_all_reduce", _address(send_buf, "send_buf"),
                          _address(recv_buf, "recv_buf"), count, data_type, red_type, group_type)

    def all_to_all(self, send_buf, send_count, recv_buf, data_type, group_type):
        return self._post("distribution_all_to_all", _address(send_buf, "send_buf"), send_count,
                          _address(recv_buf, "recv_buf"), data_type, group_type)

    def all_to_allv(self, send_buf, send_counts, send_offsets, recv_buf, recv_counts,
                    recv_offsets, data_type, group_type):
        return self._post("distribution_all_to_allv", _address(send_buf, "send_buf"),
                          _sizes(send_counts, "send_counts"), _sizes(send_offsets, "send_offsets"),
                          _address(recv_buf, "recv_buf"), _sizes(recv_counts, "recv_counts"),
                          _sizes(recv_offsets, "recv_offsets"), data_type, group_type)

    def gather(self, send_buf, send_count, recv_buf, data_type, root_idx, group_type):
        return self._post("distribution_gather", _address(send_buf, "send_buf"), send_count,
                          _address(recv_buf, "recv_buf"), data_type, root_idx, group_type)

    def all_gather(self, send_buf, send_count, recv_buf, data_type, group_type):
        return self._post("distribution_all_gather", _address(send_buf, "send_buf"), send_count,
                          _address(recv_buf, "recv_buf"), data_type, group_type)

    def all_gatherv(self, send_buf, send_count, recv_buf, recv_counts, data_type, group_type):
        """nodecomm extension: block i of recv_buf starts at sum(recv_counts[:i])."""
        return self._post("distribution_all_gatherv", _address(send_buf, "send_buf"),
                          send_count, _address(recv_buf, "recv_buf"),
                          _sizes(recv_counts, "recv_counts"), data_type, group_type)

    def scatter(self, send_buf, recv_buf, recv_count, data_type, root_idx, group_type):
        return self._post("distribution_scatter", _address(send_buf, "send_buf"),
                          _address(recv_buf, "recv_buf"), recv_count, data_type, root_idx,
                          group_type)

    def reduce_scatter(self, send_buf, recv_buf, recv_count, data_type, red_type, group_type):
        return self._post("distribution_reduce_scatter", _address(send_buf, "send_buf"),
                          _address(recv_buf, "recv_buf"), recv_count, data_type, red_type,
                          group_type)

    def barrier(self, group_type):
        _call("distribution_barrier", self._handle, group_type)


class _OperationRegInfo(_Object):
    def __init__(self, handle):
        super().__init__(handle)
        self._counts = {"input": 0, "output": 0, "parameter_set": 0}

    __slots__ = ("_counts",)

    def _next(self, kind):
        # mlsl.h drops the index; it is the number of earlier additions of the same kind.
        index = self._counts[kind]
        self._counts[kind] += 1
        return index

    def set_name(self, name):
        if isinstance(name, str):
            name = name.encode()
        _call("operation_reg_info_set_name", self._handle, name)

    def add_input(self, fm_count, fm_size, data_type):
        _call("operation_reg_info_add_input", self._handle, fm_count, fm_size, data_type)
        return self._next("input")

    def add_output(self, fm_count, fm_size, data_type):
        _call("operation_reg_info_add_output", self._handle, fm_count, fm_size, data_type)
        return self._next("output")

    def add_parameter_set(self, kernel_count, kernel_size, data_type, dist_update=False,
                          compress_type=CompressionType.NONE):
        _call("operation_reg_info_add_parameter_set_with_compress", self._handle, kernel_count,
              kernel_size, data_type, 1 if dist_update else 0, compress_type)
        return self._next("parameter_set")

    def validate(self, dist=None):
        _call("operation_reg_info_validate", self._handle, _handle(dist))


class _Operation(_Object):
    def set_distribution(self, dist):
        _call("operation_set_distribution", self._handle, _handle(dist))

    def get_distribution(self):
        return _wrap(_Distribution, _get("operation_get_distribution", _H, self._handle))

    def get_session(self):
        return _wrap(_Session, _get("operation_get_session", _H, self._handle))

    def get_op_type(self):
        return _get("operation_get_op_type", c_int, self._handle)

    def set_prev(self, prev_op, act_idx, prev_op_act_idx):
        _call("operation_set_prev", self._handle, _handle(prev_op), act_idx, prev_op_act_idx)

    def set_next(self, next_op, act_idx, next_op_act_idx):
        _call("operation_set_next", self._handle, _handle(next_op), act_idx, next_op_act_idx)

    def get_name(self):
        """bytes, as MLSL's module returns it."""
        return _get("operation_get_name", c_char_p, self._handle)

    def get_global_minibatch_size(self):
        return _get("operation_get_global_minibatch_size", _SZ, self._handle)

    def get_local_minibatch_size(self):
        return _get("operation_get_local_minibatch_size", _SZ, self._handle)

    def get_global_minibatch_offset(self):
        return _get("operation_get_global_minibatch_offset", _SZ, self._handle)

    def get_input_count(self):
        return _get("operation_get_input_count", _SZ, self._handle)

    def get_input(self, idx):
        return _Activation(_get("operation_get_input", _H, self._handle, idx))

    def get_output_count(self):
        return _get("operation_get_output_count", _SZ, self._handle)

    def get_output(self, idx):
        return _Activation(_get("operation_get_output", _H, self._handle, idx))

    def has_parameter_sets(self):
        return _get("operation_has_parameter_sets", c_int, self._handle) != 0

    def get_parameter_set_count(self):
        return _get("operation_get_parameter_set_count", _SZ, self._handle)

    def get_parameter_set(self, idx):
        return _ParameterSet(_get("operation_get_parameter_set", _H, self._handle, idx))


class _Statistics(_Object):
    def start(self):
        _call("statistics_start", self._handle)

    def stop(self):
        _call("statistics_stop", self._handle)

    def reset(self):
        _call("statistics_reset", self._handle)

    def dump(self):
        """Statistics::Print (MLSL's module calls it dump)."""
        _call("statistics_print", self._handle)

    print = dump

    def is_started(self):
        return _get("statistics_is_started", c_int, self._handle) != 0

    def is_enabled(self):
        return _get("statistics_is_enabled", c_int, self._handle) != 0

    def get_isolation_comm_cycles(self, op_idx):
        return _get("statistics_get_isolation_comm_cycles", _ULL, self._handle, op_idx)

    def get_comm_size(self, op_idx):
        return _get("statistics_get_comm_size", _SZ, self._handle, op_idx)

    def get_comm_cycles(self, op_idx):
        return _get("statistics_get_comm_cycles", _ULL, self._handle, op_idx)

    def get_compute_cycles(self, op_idx):
        return _get("statistics_get_compute_cycles", _ULL, self._handle, op_idx)

    def get_total_isolation_comm_cycles(self):
        return _get("statistics_get_total_isolation_comm_cycles", _ULL, self._handle)

    def get_total_comm_size(self):
        return _get("statistics_get_total_comm_size", _SZ, self._handle)

    def get_total_comm_cycles(self):
        return _get("statistics_get_total_comm_cycles", _ULL, self._handle)

    def get_total_compute_cycles(self):
        return _get("statistics_get_total_compute_cycles", _ULL, self._handle)


class _Session(_Object):
    def set_global_minibatch_size(self, batch_size):
        _call("session_set_global_minibatch_size", self._handle, batch_size)

    def get_global_minibatch_size(self):
        return _get("session_get_global_minibatch_size", _SZ, self._handle)

    def get_phase_type(self):
        return _get("session_get_phase_type", c_int, self._handle)

    def create_operation_reg_info(self, op_type):
        return _OperationRegInfo(
            _get("session_create_operation_reg_info", _H, self._handle, op_type))

    def delete_operation_reg_info(self, reg_info):
        _call("session_delete_operation_reg_info", self._handle, _handle(reg_info))

    def add_operation_with_distribution(self, reg_info, dist):
        return _get("session_add_operation_with_distribution", _SZ, self._handle,
                    _handle(reg_info), _handle(dist))

    def add_operation(self, reg_info):
        return _get("session_add_operation", _SZ, self._handle, _handle(reg_info))

    def remove_operations(self):
        _call("session_remove_operations", self._handle)

    def get_operation_count(self):
        return _get("session_get_operation_count", _SZ, self._handle)

    def get_operation(self, op_idx):
        return _Operation(_get("session_get_operation", _H, self._handle, op_idx))

    def commit(self):
        _call("session_commit", self._handle)

    def get_stats(self):
        return _Statistics(_get("session_get_stats", _H, self._handle))


# ---- the environment ----


class _Module:
    """Module-wide init bookkeeping: every MLSL() object shares one library state."""

    ref_count = 0
    auto = None  # the MLSL() that MLSL_ALLOW_REINIT=1 created at import


class MLSL:
    """The process's MLSL environment. Every instance shares the one library state; init()
    and finalize() count, so nested users may each init and finalize once."""

    def __init__(self):
        _load()

    def get_handle(self):
        return _Library.env

    def get_version(self):
        return _get("environment_get_version", c_int)

    def configure(self, config=None):
        if isinstance(config, str):
            config = config.encode()
        _call("environment_configure", _Library.env, config)

    def init(self):
        _Module.ref_count += 1
        _log.debug("init: reference count %d", _Module.ref_count)
        if not self.is_initialized():
            argc = c_int(0)
            argv = (c_char_p * 1)(None)
            argv_p = ctypes.cast(argv, POINTER(c_char_p))
            try:
                _call("environment_init", _Library.env, byref(argc), byref(argv_p))
            except Error:
                _Module.ref_count -= 1
                raise
            _log.debug("initialized")

    def finalize(self):
        if _Module.ref_count <= 0:
            raise Error("mlsl: finalize() without a matching init()")
        _Module.ref_count -= 1
        _log.debug("finalize: reference count %d", _Module.ref_count)
        if _Module.ref_count == 0 and self.is_initialized():
            _call("environment_finalize", _Library.env)
            _log.debug("finalized")

    def is_initialized(self):
        return _get("environment_is_initialized", c_int, _Library.env) != 0

    def get_process_idx(self):
        return _get("environment_get_process_idx", _SZ, _Library.env)

    def get_process_count(self):
        return _get("environment_get_process_count", _SZ, _Library.env)

    def create_session(self, phase_type=PhaseType.TRAIN):
        return _Session(_get("environment_create_session", _H, _Library.env, phase_type))

    def delete_session(self, session):
        _call("environment_delete_session", _Library.env, _handle(session))

    def create_distribution(self, data_parts, model_parts):
        return _Distribution(_get("environment_create_distribution", _H, _Library.env,
                                  data_parts, model_parts))

    def create_distribution_with_colors(self, data_color, model_color):
        """nodecomm extension: Environment::CreateDistributionWithColors."""
        return _Distribution(_get("environment_create_distribution_with_colors", _H,
                                  _Library.env, data_color, model_color))

    def delete_distribution(self, dist):
        _call("environment_delete_distribution", _Library.env, _handle(dist))

    def wait(self, req):
        _call("environment_wait", _Library.env, _handle(req))

    def test(self, req):
        return _get("environment_test", c_int, _Library.env, _handle(req)) != 0

    def alloc(self, size, alignment):
        return c_void_p(_get("environment_alloc", _VP, _Library.env, size, alignment))

    def free(self, ptr):
        _call("environment_free", _Library.env, _address(ptr, "free ptr"))

    def set_quantization_params(self, params):
        """nodecomm extension; params is a QuantParams."""
        if not isinstance(params, QuantParams):
            raise TypeError("set_quantization_params: expected mlsl.QuantParams, not "
                            f"{type(params).__name__}")
        _call("environment_set_quantization_params", _Library.env, ctypes.addressof(params))

    def get_quantization_params(self):
        """nodecomm extension: a copy of the library's QuantParams, or None."""
        address = _get("environment_get_quantization_params", _H, _Library.env)
        if not address:
            return None
        return QuantParams.from_buffer_copy(QuantParams.from_address(address))


def close():
    """Finalizes what init() started when exactly one init is outstanding (the import-time one
    of MLSL_ALLOW_REINIT=1, typically); a no-op when none is."""
    if _Module.ref_count == 0:
        _Module.auto = None
        return
    if _Module.ref_count != 1:
        raise Error(f"mlsl.close: {_Module.ref_count} init() calls are outstanding, expected 1")
    (_Module.auto or MLSL()).finalize()
    _Module.auto = None


def _configure_logging():
    level = os.environ.get("MLSL_LOG_LEVEL")
    if level is None:
        return
    try:
        level = int(level)
    except ValueError:
        _log.warning("MLSL_LOG_LEVEL=%r is not a number; ignored", level)
        return
    # MLSL's levels: 0 errors, 1 info, 2 debug, 3 trace.
    _log.setLevel(logging.WARNING if level <= 0 else logging.INFO if level == 1 else logging.DEBUG)
    if not _log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("mlsl: %(levelname)s: %(message)s"))
        _log.addHandler(handler)


_configure_logging()

if os.environ.get("MLSL_ALLOW_REINIT") == "1":
    _Module.auto = MLSL()
    _Module.auto.init()
