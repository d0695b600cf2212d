"""Turns numpy arrays, CPU torch tensors and buffer-protocol objects into (address, count,
dtype) for the C API, without importing numpy or torch: the core package works without either.

numpy arrays are read through ``__array_interface__``; torch tensors through ``data_ptr()``;
anything else through a memoryview (bytearray, array.array, ...).
"""

import ctypes
import struct

# numpy typestr (without byte order) -> nodecomm dtype
_NUMPY_TYPES = {"f4": "f32", "f8": "f64", "i4": "i32", "i8": "i64", "f2": "f16", "i1": "i8",
                "u1": "u8"}
# str(torch.dtype) -> nodecomm dtype
_TORCH_TYPES = {"torch.float32": "f32", "torch.float64": "f64", "torch.int32": "i32",
                "torch.int64": "i64", "torch.float16": "f16", "torch.bfloat16": "bf16",
                "torch.int8": "i8", "torch.uint8": "u8"}
# memoryview format -> nodecomm dtype (native sizes on x86-64 / aarch64 Linux)
_STRUCT_TYPES = {"f": "f32", "d": "f64", "i": "i32", "l": "i64", "q": "i64", "e": "f16",
                 "b": "i8", "B": "u8"}
# nodecomm dtype -> numpy dtype name / torch dtype attribute, for allocating outputs
NUMPY_NAMES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64",
               "f16": "float16", "i8": "int8", "u8": "uint8"}
TORCH_NAMES = {"f32": "float32", "f64": "float64", "i32": "int32", "i64": "int64",
               "f16": "float16", "bf16": "bfloat16", "i8": "int8", "u8": "uint8"}


def is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


class Buffer:
    """One contiguous buffer as the C API sees it. Holds ``obj`` (and any ctypes view of it)
    so that the memory stays alive while a request uses it."""

    __slots__ = ("obj", "kind", "address", "count", "dtype", "shape", "writable", "_keep")

    def __init__(self, obj, kind, address, count, dtype, shape, writable, keep=None):
        self.obj = obj
        self.kind = kind  # "torch", "numpy" or "buffer"
        self.address = address
        self.count = count
        self.dtype = dtype
        self.shape = tuple(shape)
        self.writable = writable
        self._keep = keep

    @property
    def nbytes(self):
        from ._capi import DTYPE_SIZES
        return self.count * DTYPE_SIZES[self.dtype]


def _c_contiguous(shape, strides, itemsize):
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _from_torch(t, what):
    if t.device.type != "cpu":
        raise ValueError(f"{what}: nodecomm takes CPU tensors, not {t.device}")
    if t.is_sparse:
        raise ValueError(f"{what}: sparse tensors are not supported")
    dtype = _TORCH_TYPES.get(str(t.dtype))
    if dtype is None:
        raise TypeError(f"{what}: unsupported tensor dtype {t.dtype}")
    if not t.is_contiguous():
        raise ValueError(f"{what}: tensor must be contiguous (call .contiguous() first)")
    # requires_grad leaves may still be written through data_ptr; autograd is not involved.
    return Buffer(t, "torch", t.data_ptr(), t.numel(), dtype, t.shape, True)


def _from_array_interface(a, iface, what):
    typestr = iface["typestr"]
    if typestr[0] == ">":
        raise TypeError(f"{what}: big-endian arrays are not supported")
    dtype = _NUMPY_TYPES.get(typestr[1:])
    if dtype is None:
        raise TypeError(f"{what}: unsupported array dtype {typestr}")
    shape = tuple(iface["shape"])
    count = 1
    for dim in shape:
        count *= dim
    strides = iface.get("strides")
    itemsize = int(typestr[2:])
    if strides is not None and not _c_contiguous(shape, strides, itemsize):
        raise ValueError(f"{what}: array must be C-contiguous (use numpy.ascontiguousarray)")
    address, readonly = iface["data"]
    return Buffer(a, "numpy", address or 0, count, dtype, shape, not readonly)


def _from_buffer_protocol(obj, what):
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{what}: expected a numpy array, a CPU torch tensor or a buffer, "
            f"not {type(obj).__name__}") from None
    fmt = view.format.lstrip("@=<")
    dtype = _STRUCT_TYPES.get(fmt)
    if dtype is None or view.itemsize != struct.calcsize(fmt):
        raise TypeError(f"{what}: unsupported buffer format '{view.format}'")
    if not view.c_contiguous:
        raise ValueError(f"{what}: buffer must be C-contiguous")
    count = view.nbytes // view.itemsize
    if view.nbytes == 0:
        return Buffer(obj, "buffer", 0, 0, dtype, view.shape, not view.readonly)
    if view.readonly:
        # ctypes can only take the address of writable memory; a read-only buffer can still be
        # sent, from a private copy.
        copy = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        return Buffer(obj, "buffer", ctypes.addressof(copy), count, dtype, view.shape, False,
                      keep=copy)
    raw = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return Buffer(obj, "buffer", ctypes.addressof(raw), count, dtype, view.shape, True,
                  keep=(view, raw))


def describe(obj, what):
    """Buffer for `obj`; `what` names the argument in error messages."""
    if isinstance(obj, Buffer):
        return obj
    if is_torch_tensor(obj):
        return _from_torch(obj, what)
    # Read once: numpy builds a new dict on every access (about a microsecond), and a small
    # allreduce describes two buffers.
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return _from_array_interface(obj, iface, what)
    return _from_buffer_protocol(obj, what)


def empty_like_kind(like, shape, arena_alloc=None):
    """A new, uninitialised buffer of `like`'s kind and dtype with `shape`. With
    `arena_alloc(shape, dtype, kind)`, it comes from the arena (zero copy)."""
    if arena_alloc is not None:
        return arena_alloc(shape, like.dtype, like.kind)
    if like.kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, TORCH_NAMES[like.dtype]))
    if like.kind == "numpy":
        import numpy
        return numpy.empty(shape, dtype=NUMPY_NAMES[like.dtype])
    count = 1
    for dim in shape:
        count *= dim
    fmt = memoryview(like.obj).format
    return memoryview(bytearray(count * memoryview(like.obj).itemsize)).cast(fmt, shape)
