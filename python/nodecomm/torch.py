"""PyTorch integration: a DistributedDataParallel communication hook that averages gradient
buckets through nodecommd.

    import nodecomm, nodecomm.torch
    nodecomm.init()
    nodecomm.torch.init_process_group()          # DDP's setup traffic (see below)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(nodecomm.torch.HookState(compress="bf16"),
                           nodecomm.torch.allreduce_hook)

The hook posts each bucket as soon as backward has filled it and returns at once; the daemon
moves the data while backward computes the next buckets. A background thread completes the
returned futures; DDP waits for them at the end of backward.

DDP still needs a torch.distributed process group: it broadcasts the parameters at
construction and agrees on the bucket layout after the first step through it. Gradients never
touch it once the hook is registered. init_process_group() makes a gloo group for that
control traffic, with a file-store rendezvous on nodecomm's world rank and size.
"""

import os
import threading
import time
import uuid
import warnings

import torch

from . import _capi, _core
from ._capi import Error

__all__ = ["HookState", "allreduce_hook", "init_process_group", "register_tensor",
           "rendezvous_file"]


def register_tensor(tensor):
    """Makes collectives on `tensor` (and on every view of its storage) zero-copy: moves the
    storage into shared memory in place, as Tensor.share_memory_() does with torch's
    file-descriptor strategy (every view follows; the data is kept), and registers that memory
    with the daemon (nodecomm.register_fd). The storage stays allocated until
    nodecomm.finalize(). Raises nodecomm.Error if the daemon refuses (its --max-arena limit,
    64 regions), TypeError for a non-CPU tensor."""
    if tensor.device.type != "cpu":
        raise TypeError(f"register_tensor: a CPU tensor is needed, not {tensor.device}")
    storage = tensor.storage()
    share_fd = getattr(storage, "_share_fd_cpu_", None) or getattr(storage, "_share_fd_", None)
    if share_fd is None:
        raise TypeError("register_tensor: this torch cannot share storages by descriptor")
    fd = share_fd()[0]
    if fd < 0:
        raise TypeError("register_tensor: the storage is shared by file name, not descriptor")
    _core.register_fd(fd, storage.nbytes(), storage.data_ptr(), owner=storage)


class HookState:
    """Settings and per-bucket buffers of allreduce_hook.

    priority   base priority. Bucket i is posted with priority + i: DDP fills bucket 0 (the
               last layers) first, and the buckets of the first layers last, so the later a
               bucket arrives the more urgent it is (the next forward needs it first).
    compress   None, "bf16", "f16" or "int8": the wire format between nodes (f32 gradients).
    name       prefix of the per-bucket tensor names ("<name>.bucket<i>"): int8 compression
               keeps its error-feedback residual per name, and diagnostics show them.
    average    True: every rank gets the mean (op avg); False: the sum.
    register   True: register each bucket's own memory with the daemon (register_tensor) the
               first time the hook sees it, so the daemon reads the gradients and writes the
               result in place: no copy at all. DDP allocates its buckets once (again after
               its first step, when it rebuilds them), so this happens twice per bucket.
               Falls back to `zero_copy` if registration is refused.
    zero_copy  True: stage each bucket in a persistent arena buffer (one copy in, one copy
               back into the bucket on the completion thread). False: post the bucket's own
               memory and let libnodecomm copy it in and out.
    piece_mb   each bucket is posted as pieces of at most this many MB (default 4; 0: the
               whole bucket as one operation). The first piece is on its way to the other
               nodes while the hook still copies the rest, and a finished piece is copied back
               while later ones are on the wire, so only the last piece's copies are exposed.
    timeout    seconds before a bucket fails with nodecomm.Error (default: NODECOMM_TIMEOUT_SEC,
               else 300).
    """

    def __init__(self, priority=0, compress=None, name="ddp", average=True, zero_copy=True,
                 timeout=None, piece_mb=4, register=True):
        if compress is not None and str(compress).lower() not in _capi.COMPRESS:
            raise ValueError(f"HookState: unknown compress {compress!r}")
        self.priority = int(priority)
        self.compress = None if compress in (None, "none") else str(compress).lower()
        self.name = name
        self.average = average
        self.zero_copy = zero_copy
        self.register = register
        self.registration_error = None  # why registering a bucket failed, if it did
        if piece_mb < 0:
            raise ValueError(f"HookState: piece_mb must be >= 0, not {piece_mb!r}")
        self.piece_bytes = int(piece_mb * 1e6)
        self.timeout = float(timeout if timeout is not None
                             else os.environ.get("NODECOMM_TIMEOUT_SEC", "300") or 300)
        self.buckets_posted = 0
        self._staging = {}  # bucket index -> arena tensor of that bucket's size and dtype
        self._staging_context = None  # the context they belong to (a re-init unmaps them)

    def staging_buffer(self, index, like):
        """The arena tensor for bucket `index`, (re)allocated when DDP's layout changes (it
        rebuilds its buckets after the first step). None if the arena has no room."""
        if self._staging_context is not _core._ctx:
            self._staging.clear()
            self._staging_context = _core._ctx
        buf = self._staging.get(index)
        if buf is None or buf.numel() != like.numel() or buf.dtype != like.dtype:
            self._staging.pop(index, None)  # let the old block go back to the arena first
            try:
                buf = _core.alloc_tensor((like.numel(),), like.dtype)
            except Error as e:
                if e.status != _capi.ERR_NO_MEMORY:
                    raise
                return None
            self._staging[index] = buf
        return buf

    def registered(self, grads):
        """True if the bucket's memory is registered with the daemon (registering it now if
        it is new); False, once and for all, after a refusal."""
        if not self.register or self.registration_error is not None:
            return False
        if _core.is_arena(grads):
            return True
        try:
            register_tensor(grads)
        except (Error, TypeError) as e:
            self.registration_error = e
            warnings.warn(f"nodecomm.torch: buckets go through staging copies: {e}",
                          RuntimeWarning, stacklevel=3)
            return False
        return True

    def pieces(self, numel, element_size):
        """[(start, end)) element ranges that split a bucket of `numel` elements into pieces
        of at most piece_bytes, of nearly equal size."""
        total = numel * element_size
        if self.piece_bytes <= 0 or total <= self.piece_bytes:
            return [(0, numel)]
        count = -(-total // self.piece_bytes)
        bounds = [numel * i // count for i in range(count + 1)]
        return list(zip(bounds[:-1], bounds[1:]))


class _BucketFuture:
    """The pieces of one bucket in flight: completes DDP's future once all are back, or with
    the first failure. The hook (a failed post) and the completion thread may both fail it."""

    def __init__(self, future, result, pieces):
        self.future = future
        self.result = result
        self.remaining = pieces
        self.failed = False
        self._lock = threading.Lock()

    def piece_done(self):
        with self._lock:
            self.remaining -= 1
            done = self.remaining == 0 and not self.failed
        if done:
            self.future.set_result(self.result)

    def fail(self, error):
        with self._lock:
            first = not self.failed
            self.failed = True
        if first:
            self.future.set_exception(error)


class _Completer:
    """One thread per process that polls the hook's requests and completes their futures.

    It polls (nc_test) rather than blocking in nc_wait on one request: buckets complete out of
    posting order under priorities, and a poll loop can stop promptly at finalize (which must
    not race with another call on the context)."""

    MIN_PAUSE = 50e-6
    MAX_PAUSE = 1e-3

    def __init__(self):
        self._cond = threading.Condition()
        self._pending = []  # [request, _BucketFuture, (arena piece, bucket piece)|None, deadline]
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="nodecomm-ddp-completer",
                                        daemon=True)
        self._thread.start()

    def add(self, request, bucket, copy_back, timeout):
        with self._cond:
            self._pending.append([request, bucket, copy_back, time.monotonic() + timeout])
            self._cond.notify()

    def stop(self):
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def _run(self):
        pause = self.MIN_PAUSE
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                pending = list(self._pending)
                stopping = self._stopping
            if stopping:
                for request, bucket, _, _ in pending:
                    bucket.fail(Error(_capi.ERR_NOT_INITIALIZED,
                                      "nodecomm.finalize() with the bucket in flight",
                                      request.description))
                return
            finished = []
            now = time.monotonic()
            for item in pending:
                request, bucket, copy_back, deadline = item
                try:
                    if request.test():
                        if copy_back is not None and not bucket.failed:
                            copy_back[1].copy_(copy_back[0])  # arena piece -> DDP's bucket
                        bucket.piece_done()
                        finished.append(item)
                    elif now > deadline:
                        bucket.fail(Error(_capi.ERR_TIMEOUT, "DDP bucket not reduced in time",
                                          request.description))
                        finished.append(item)
                except Error as e:
                    bucket.fail(e)
                    finished.append(item)
            with self._cond:
                for item in finished:
                    self._pending.remove(item)
            if finished:
                pause = self.MIN_PAUSE
            else:
                time.sleep(pause)
                pause = min(pause * 2, self.MAX_PAUSE)


_completer = None
_completer_lock = threading.Lock()


def _stop_completer():
    global _completer
    with _completer_lock:
        completer, _completer = _completer, None
    if completer is not None:
        completer.stop()


_core._before_finalize.append(_stop_completer)


def _get_completer():
    global _completer
    with _completer_lock:
        if _completer is None:
            _completer = _Completer()
        return _completer


def _bucket_buffer(bucket):
    # torch >= 1.12 has buffer(); older releases called it get_tensor().
    return bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()


def allreduce_hook(state, bucket):
    """DDP communication hook: averages (or sums) the bucket over every rank through the
    daemon. Returns a torch.futures.Future whose value is the reduced bucket (DDP's own
    bucket tensor, so DDP copies nothing back)."""
    grads = _bucket_buffer(bucket)
    flat = grads.view(-1)
    index = bucket.index()
    future = torch.futures.Future()
    pieces = state.pieces(flat.numel(), flat.element_size())
    pending = _BucketFuture(future, grads, len(pieces))
    completer = _get_completer()
    try:
        in_place = state.registered(grads)
        staging = (state.staging_buffer(index, grads)
                   if state.zero_copy and not in_place else None)
        for number, (start, end) in enumerate(pieces):
            name = f"{state.name}.bucket{index}"
            if len(pieces) > 1:
                name += f".{number}"
            source = flat[start:end]
            target, copy_back = source, None
            if staging is not None:
                target = staging[start:end]
                target.copy_(source)
                copy_back = (target, source)
            request = _core.allreduce(target, op="avg" if state.average else "sum",
                                      priority=state.priority + index,
                                      compress=state.compress, name=name)
            completer.add(request, pending, copy_back, state.timeout)
    except Error as e:
        pending.fail(e)  # pieces already posted still complete, and are ignored
        return future
    state.buckets_posted += 1
    return future


def rendezvous_file(tag="ddp"):
    """A file path unique to this job run and shared by all its ranks, for
    torch.distributed's file:// init. Rank 0 makes it up and broadcasts it through nodecomm,
    so a file left over from an earlier run is never reused."""
    size = 256
    buf = bytearray(size)
    if _core.world_rank() == 0:
        job = os.environ.get("NODECOMM_JOB", "job").replace("/", "_")
        path = f"/tmp/nodecomm-{tag}-{job}-{uuid.uuid4().hex}.store".encode()
        if len(path) >= size:
            raise ValueError(f"rendezvous_file: path too long: {path!r}")
        buf[:len(path)] = path
    _core.broadcast(buf, root=0, name=f"{tag}.rendezvous").wait()
    return bytes(buf).rstrip(b"\0").decode()


def init_process_group(backend="gloo", path=None, timeout=300):
    """torch.distributed.init_process_group on nodecomm's world rank and size, with a
    file-store rendezvous (`path`, or rendezvous_file()). Used by DDP for its setup traffic
    when gradients go through allreduce_hook, and for the gloo reference run."""
    import datetime

    import torch.distributed as dist
    if path is None:
        path = rendezvous_file(backend)
    dist.init_process_group(backend, init_method=f"file://{path}",
                            rank=_core.world_rank(), world_size=_core.world_size(),
                            timeout=datetime.timedelta(seconds=timeout))
    return path
