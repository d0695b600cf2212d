"""The process's nodecomm context, arena buffers, requests and collectives."""

import atexit
import collections
import ctypes
import threading
import time
import warnings
import weakref

from . import _capi
from ._buffers import NUMPY_NAMES, TORCH_NAMES, describe, empty_like_kind
from ._capi import Error

_state_lock = threading.Lock()
_ctx = None  # the _Context after init(), None before and after finalize()
# Called (no arguments) at the start of finalize(), before nc_finalize: the torch hook stops its
# completion thread here, because nc_finalize must not race with other calls on the context.
_before_finalize = []


class _Context:
    def __init__(self, handle):
        self.handle = handle
        self.alive = True
        self.rank = _capi.nc_world_rank(handle)
        self.size = _capi.nc_world_size(handle)
        self.lock = threading.RLock()
        self.blocks = {}  # arena address -> bytes, for the blocks nc_alloc gave us
        # Registered regions: (address, bytes, owner). `owner` (e.g. a torch storage) is kept
        # alive until finalize, so that its memory is neither freed nor reused meanwhile.
        self.regions = []
        self.inflight = {}  # request handle -> Request: keeps buffers alive until completion
        # Blocks whose last array/tensor died. Finalizers only append here (thread-safe, takes
        # no lock): they can run inside any allocation, even one made while self.lock is held
        # and self.blocks is being iterated. drain_frees() returns them to the arena.
        self.dead_blocks = collections.deque()

    def drain_frees(self):
        with self.lock:
            while self.dead_blocks:
                address = self.dead_blocks.popleft()
                if self.alive and self.blocks.pop(address, None) is not None:
                    _capi.nc_free(self.handle, address)

    def in_arena(self, address, nbytes):
        """True if [address, +nbytes) is zero-copy memory: an arena block or a registered
        region."""
        self.drain_frees()
        with self.lock:
            spans = list(self.blocks.items()) + [(a, n) for a, n, _ in self.regions]
        return any(start <= address and address + nbytes <= start + size
                   for start, size in spans)


def _context(what):
    ctx = _ctx
    if ctx is None or not ctx.alive:
        raise Error(_capi.ERR_NOT_INITIALIZED,
                    "nodecomm is not initialized (call nodecomm.init() first)", what)
    return ctx


def init(job=None, arena_bytes=None, timeout=None, runtime_dir=None, instance=None,
         local_rank=None, local_size=None):
    """Attaches this process to its node's nodecommd and waits until every rank of the job has
    attached. Arguments left at None come from the NODECOMM_* environment (as nodecomm-launch
    sets it), then from the C library's defaults. `timeout` (seconds) bounds the job formation
    and every later wait. Calling init() again while initialized does nothing."""
    global _ctx
    with _state_lock:
        if _ctx is not None:
            return
        opts = _capi.InitOptions()
        _capi.nc_init_options_default(ctypes.byref(opts))
        # Encoded strings must outlive nc_init, which copies them.
        keep = []
        for field, value in (("job", job), ("runtime_dir", runtime_dir), ("instance", instance)):
            if value is not None:
                keep.append(str(value).encode())
                setattr(opts, field, keep[-1])
        if local_rank is not None:
            opts.local_rank = int(local_rank)
        if local_size is not None:
            opts.local_size = int(local_size)
        if arena_bytes is not None:
            opts.arena_bytes = int(arena_bytes)
        if timeout is not None:
            opts.timeout_sec = float(timeout)
        handle = _capi.context_p()
        status = _capi.nc_init(ctypes.byref(opts), ctypes.byref(handle))
        _capi.raise_for_status(status, "nodecomm.init")
        _ctx = _Context(handle)


def finalize():
    """Detaches from the daemon. Requests still in flight are abandoned; arena buffers
    (alloc_array/alloc_tensor) must not be used afterwards: their memory is unmapped."""
    global _ctx
    for hook in list(_before_finalize):
        hook()
    with _state_lock:
        ctx, _ctx = _ctx, None
        if ctx is None:
            return
        with ctx.lock:
            ctx.alive = False
            live_blocks = len(ctx.blocks)
            ctx.blocks.clear()
            ctx.inflight.clear()
        status = _capi.nc_finalize(ctx.handle)
    if live_blocks:
        warnings.warn(f"nodecomm.finalize: {live_blocks} arena buffer(s) still referenced; "
                      "their memory is gone now", ResourceWarning, stacklevel=2)
    _capi.raise_for_status(status, "nodecomm.finalize")


atexit.register(finalize)


def initialized():
    return _ctx is not None and _ctx.alive


def world_rank():
    return _context("world_rank").rank


def world_size():
    return _context("world_size").size


def node_index():
    return _capi.nc_node_index(_context("node_index").handle)


def node_count():
    return _capi.nc_node_count(_context("node_count").handle)


def local_rank():
    return _capi.nc_local_rank(_context("local_rank").handle)


def local_size():
    return _capi.nc_local_size(_context("local_size").handle)


def arena_info():
    """(total_bytes, free_bytes) of this process's arena."""
    ctx = _context("arena_info")
    ctx.drain_frees()
    total, free = ctypes.c_uint64(), ctypes.c_uint64()
    _capi.raise_for_status(_capi.nc_arena_info(ctx.handle, ctypes.byref(total),
                                               ctypes.byref(free)), "arena_info")
    return total.value, free.value


# ---- arena buffers -------------------------------------------------------------------------

def _free_block(ctx, address):
    # weakref.finalize callback: the last array/tensor over the block is gone (any thread).
    ctx.dead_blocks.append(address)


def _dtype_name(dtype):
    """nodecomm dtype name for "f32", "float32", numpy.float32, numpy.dtype or torch.float32."""
    if isinstance(dtype, str) and dtype in _capi.DTYPES:
        return dtype
    text = str(getattr(dtype, "__name__", dtype))  # numpy.float32 (a type) -> "float32"
    text = text.replace("torch.", "").replace("numpy.", "")
    for name, numpy_name in TORCH_NAMES.items():
        if text == numpy_name:
            return name
    aliases = {"float": "f32", "half": "f16", "double": "f64", "int": "i32", "long": "i64"}
    if text in aliases:
        return aliases[text]
    raise TypeError(f"unsupported dtype {dtype!r}")


def _arena_raw(shape, dtype, what):
    """A ctypes char array over a new arena block that frees itself when collected."""
    ctx = _context(what)
    count = 1
    for dim in shape:
        count *= int(dim)
    nbytes = max(count * _capi.DTYPE_SIZES[dtype], 1)
    ctx.drain_frees()
    ptr = ctypes.c_void_p()
    status = _capi.nc_alloc(ctx.handle, nbytes, ctypes.byref(ptr))
    _capi.raise_for_status(status, f"rank {ctx.rank}: {what}({tuple(shape)}, {dtype}) of "
                                   f"{nbytes} bytes")
    with ctx.lock:
        ctx.blocks[ptr.value] = nbytes
    raw = (ctypes.c_char * nbytes).from_address(ptr.value)
    # The raw array owns the block: numpy/torch views keep `raw` alive, and `raw` frees the
    # block when it is collected.
    weakref.finalize(raw, _free_block, ctx, ptr.value)
    return raw, count


def alloc_array(shape, dtype="float32"):
    """A numpy array in the shared arena: collectives on it are zero-copy (the daemon reads and
    writes it in place). Freed when garbage collected. Contents are uninitialised."""
    import numpy
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    name = _dtype_name(dtype)
    if name not in NUMPY_NAMES:
        raise TypeError(f"alloc_array: numpy has no {name}; use alloc_tensor")
    raw, count = _arena_raw(shape, name, "alloc_array")
    return numpy.frombuffer(raw, dtype=NUMPY_NAMES[name], count=count).reshape(shape)


def alloc_tensor(shape, dtype="float32"):
    """A CPU torch tensor in the shared arena (zero-copy collectives). Freed when garbage
    collected. Contents are uninitialised."""
    import torch
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    name = _dtype_name(dtype)
    raw, count = _arena_raw(shape, name, "alloc_tensor")
    torch_dtype = getattr(torch, TORCH_NAMES[name])
    if count == 0:
        return torch.empty(shape, dtype=torch_dtype)
    # torch.frombuffer holds a reference to `raw` for as long as the tensor's storage lives.
    return torch.frombuffer(raw, dtype=torch_dtype, count=count).view(shape)


def register_fd(fd, nbytes, address, file_offset=0, owner=None):
    """Registers memory this process has mapped MAP_SHARED at `address` from file descriptor
    `fd` (a memfd or /dev/shm file) at `file_offset`: collectives on buffers inside
    [address, address + nbytes) become zero-copy, as on alloc_array/alloc_tensor buffers (the
    daemon maps the same pages). The region stays registered until finalize(); `owner` (the
    object that owns the mapping) is kept alive until then. See nc_register_fd."""
    ctx = _context("register_fd")
    with ctx.lock:
        if any(start == address and size == nbytes for start, size, _ in ctx.regions):
            return  # already registered
        status = _capi.nc_register_fd(ctx.handle, int(fd), int(file_offset), int(nbytes),
                                      int(address))
        _capi.raise_for_status(status, f"rank {ctx.rank}: register_fd({nbytes} bytes)")
        ctx.regions.append((int(address), int(nbytes), owner))


def is_arena(obj):
    """True if `obj` (array, tensor or buffer) lies inside this process's arena."""
    buf = describe(obj, "obj")
    return buf.count > 0 and _context("is_arena").in_arena(buf.address, buf.nbytes)


# ---- requests ------------------------------------------------------------------------------

class Request:
    """An operation in flight. `test()` polls, `wait()` blocks; both raise nodecomm.Error if the
    operation failed. Until it completes, the request holds the buffers it uses (and the
    context registry holds the request), so dropping it early never frees memory the daemon
    still writes."""

    def __init__(self, ctx, handle, description, keep, result):
        self._ctx = ctx
        self._handle = handle
        self._lock = threading.Lock()
        self._keep = keep
        self._error = None
        self.description = description
        self.result = result  # what wait() returns: the output array/tensor (None for barrier)
        self.done = False

    def _finish(self, status):
        # Caller holds self._lock and has just got `status` from nc_test/nc_wait in this thread.
        self.done = True
        self._keep = None
        with self._ctx.lock:
            self._ctx.inflight.pop(self._handle, None)
        if status != _capi.OK:
            self._error = Error(status, _capi.last_error(), self.description)

    def test(self):
        """True once the operation has completed (raises its error if it failed)."""
        with self._lock:
            if not self.done:
                if not self._ctx.alive:
                    raise Error(_capi.ERR_NOT_INITIALIZED, "nodecomm was finalized",
                                self.description)
                status = _capi.nc_test(self._ctx.handle, self._handle)
                if status == _capi.IN_PROGRESS:
                    return False
                self._finish(status)
            if self._error is not None:
                raise self._error
            return True

    def wait(self, timeout=None):
        """Blocks until the operation completes and returns its result. timeout=None waits up
        to the context's timeout (nodecomm.init(timeout=...), NODECOMM_TIMEOUT_SEC, 300 s).
        On a timeout the request stays valid and may be waited for again."""
        if timeout is None:
            with self._lock:
                if not self.done:
                    if not self._ctx.alive:
                        raise Error(_capi.ERR_NOT_INITIALIZED, "nodecomm was finalized",
                                    self.description)
                    status = _capi.nc_wait(self._ctx.handle, self._handle)
                    if status == _capi.ERR_TIMEOUT:
                        raise Error(status, _capi.last_error(), self.description)
                    self._finish(status)
        else:
            deadline = time.monotonic() + timeout
            pause = 20e-6
            while not self.test():
                if time.monotonic() >= deadline:
                    raise Error(_capi.ERR_TIMEOUT, f"not complete after {timeout} s",
                                self.description)
                time.sleep(pause)
                pause = min(pause * 2, 2e-3)
        if self._error is not None:
            raise self._error
        return self.result

    def __repr__(self):
        state = "done" if self.done else "in flight"
        return f"<nodecomm.Request {self.description} ({state})>"


def wait_all(requests, timeout=None):
    """Waits for every request; returns their results."""
    return [r.wait(timeout) for r in requests]


# ---- collectives ---------------------------------------------------------------------------

def _redop(op):
    if isinstance(op, int):
        return op
    try:
        return _capi.OPS[str(op).lower()]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; expected one of {sorted(_capi.OPS)}") from None


def _compress(compress):
    if compress is None or compress is False:
        return 0
    try:
        return _capi.COMPRESS[str(compress).lower()]
    except KeyError:
        raise ValueError(f"unknown compress {compress!r}; expected None or one of "
                         f"{sorted(_capi.COMPRESS)}") from None


def _post(what, fn, args, send, recv, result, name, priority, compress, extra=""):
    """Posts one collective; `fn(ctx, *args, attr, &req)`. Returns its Request."""
    ctx = _context(what)
    label = f"'{name}' " if name else ""
    dtype = send.dtype if send is not None else "-"
    count = send.count if send is not None else 0
    description = f"rank {ctx.rank}/{ctx.size}: {what} of {label}({count} x {dtype}{extra})"
    attr = None
    encoded_name = name.encode() if name else None
    if priority or encoded_name or compress:
        attr = ctypes.byref(_capi.OpAttr(int(priority), encoded_name, _compress(compress)))
    ctx.drain_frees()  # the copy path needs arena room for temporaries
    req = _capi.request_t()
    status = fn(ctx.handle, *args, attr, ctypes.byref(req))
    _capi.raise_for_status(status, description)
    request = Request(ctx, req.value, description, (send, recv), result)
    with ctx.lock:
        ctx.inflight[req.value] = request
    return request


def _check_same_dtype(what, send, recv):
    if send.dtype != recv.dtype:
        raise TypeError(f"{what}: out has dtype {recv.dtype}, input {send.dtype}")
    if not recv.writable:
        raise ValueError(f"{what}: the output buffer is read-only")


def _new_output(send, shape):
    ctx = _context("output")
    arena = None
    if send.count > 0 and ctx.in_arena(send.address, send.nbytes) and send.kind != "buffer":
        def arena(shape, dtype, kind):
            return (alloc_tensor if kind == "torch" else alloc_array)(shape, dtype)
    return empty_like_kind(send, shape, arena)


def allreduce(tensor, op="sum", *, out=None, priority=0, compress=None, name=None,
              comm=_capi.COMM_WORLD):
    """Every rank gets the reduction (op: sum, prod, min, max, avg) of every rank's `tensor`,
    in place unless `out` is given. `compress` ("bf16", "f16", "int8"; f32 only) chooses the
    wire format between nodes; int8 keeps a residual per `name`."""
    send = describe(tensor, "allreduce: tensor")
    recv = describe(out, "allreduce: out") if out is not None else send
    _check_same_dtype("allreduce", send, recv)
    if recv.count != send.count:
        raise ValueError(f"allreduce: out has {recv.count} elements, input {send.count}")
    return _post("allreduce", _capi.nc_allreduce,
                 (send.address, recv.address, send.count, _capi.DTYPES[send.dtype],
                  _redop(op), comm), send, recv, recv.obj, name, priority, compress,
                 f", {op}")


def reduce(tensor, root=0, op="sum", *, out=None, priority=0, compress=None, name=None,
           comm=_capi.COMM_WORLD):
    """Rank `root` gets the reduction of every rank's `tensor` (in place unless `out`)."""
    send = describe(tensor, "reduce: tensor")
    recv = describe(out, "reduce: out") if out is not None else send
    _check_same_dtype("reduce", send, recv)
    return _post("reduce", _capi.nc_reduce,
                 (send.address, recv.address, send.count, _capi.DTYPES[send.dtype],
                  _redop(op), int(root), comm), send, recv, recv.obj, name, priority, compress,
                 f", {op}, root {root}")


def broadcast(tensor, root=0, *, out=None, priority=0, name=None, comm=_capi.COMM_WORLD):
    """Every rank gets rank `root`'s `tensor`: in place, or into `out` when given."""
    send = describe(tensor, "broadcast: tensor")
    recv = describe(out, "broadcast: out") if out is not None else send
    _check_same_dtype("broadcast", send, recv)
    if recv.count != send.count:
        raise ValueError(f"broadcast: out has {recv.count} elements, input {send.count}")
    return _post("broadcast", _capi.nc_broadcast,
                 (send.address, recv.address, send.count, _capi.DTYPES[send.dtype], int(root),
                  comm), send, recv, recv.obj, name, priority, None, f", root {root}")


def allgather(tensor, *, out=None, priority=0, name=None, comm=_capi.COMM_WORLD):
    """Every rank gets all ranks' `tensor`s concatenated in rank order along the first axis.
    `out` (world_size x tensor's elements) is allocated when not given, in the arena if
    `tensor` is. In place when `tensor` is rank's block of `out`."""
    send = describe(tensor, "allgather: tensor")
    size = _context("allgather").size
    if out is None:
        shape = (size * send.shape[0],) + send.shape[1:] if send.shape else (size,)
        out = _new_output(send, shape)
    recv = describe(out, "allgather: out")
    _check_same_dtype("allgather", send, recv)
    if recv.count != send.count * size:
        raise ValueError(f"allgather: out has {recv.count} elements, expected "
                         f"{size} x {send.count}")
    return _post("allgather", _capi.nc_allgather,
                 (send.address, recv.address, send.count, _capi.DTYPES[send.dtype], comm),
                 send, recv, out, name, priority, None)


def reduce_scatter(tensor, op="sum", *, out=None, priority=0, name=None,
                   comm=_capi.COMM_WORLD):
    """Rank r gets block r (of world_size equal blocks) of the reduction of every rank's
    `tensor`. `out` is allocated when not given (the first axis divided by world_size when it
    divides, else flat). In place when `out` is rank's block of `tensor`."""
    send = describe(tensor, "reduce_scatter: tensor")
    size = _context("reduce_scatter").size
    if send.count % size != 0:
        raise ValueError(f"reduce_scatter: {send.count} elements do not split into "
                         f"{size} equal blocks")
    block = send.count // size
    if out is None:
        if send.shape and send.shape[0] % size == 0:
            shape = (send.shape[0] // size,) + send.shape[1:]
        else:
            shape = (block,)
        out = _new_output(send, shape)
    recv = describe(out, "reduce_scatter: out")
    _check_same_dtype("reduce_scatter", send, recv)
    if recv.count != block:
        raise ValueError(f"reduce_scatter: out has {recv.count} elements, expected {block}")
    return _post("reduce_scatter", _capi.nc_reduce_scatter,
                 (send.address, recv.address, block, _capi.DTYPES[send.dtype], _redop(op),
                  comm), send, recv, out, name, priority, None, f", {op}")


def alltoall(tensor, *, out=None, priority=0, name=None, comm=_capi.COMM_WORLD):
    """Block j (of world_size equal blocks) of rank i's `tensor` becomes block i of rank j's
    `out` (allocated like `tensor` when not given; never in place)."""
    send = describe(tensor, "alltoall: tensor")
    size = _context("alltoall").size
    if send.count % size != 0:
        raise ValueError(f"alltoall: {send.count} elements do not split into {size} blocks")
    if out is None:
        out = _new_output(send, send.shape)
    recv = describe(out, "alltoall: out")
    _check_same_dtype("alltoall", send, recv)
    if recv.count != send.count:
        raise ValueError(f"alltoall: out has {recv.count} elements, input {send.count}")
    return _post("alltoall", _capi.nc_alltoall,
                 (send.address, recv.address, send.count // size, _capi.DTYPES[send.dtype],
                  comm), send, recv, out, name, priority, None)


def barrier(*, name=None, comm=_capi.COMM_WORLD):
    """Completes once every rank has posted it."""
    return _post("barrier", _capi.nc_barrier, (comm,), None, None, None, name, 0, None)
