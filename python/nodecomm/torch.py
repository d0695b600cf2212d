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

import torch

from . import _capi, _core
from ._capi import Error

__all__ = ["HookState", "allreduce_hook", "init_process_group", "rendezvous_file"]


class HookState:
    """Settings and per-bucket buffers of allreduce_hook.

    priority   base priority. Bucket i is posted with priority + i: DDP fills bucket 0 (the
               last layers) first, and the buckets of the first layers last, so the later a
               bucket arrives the more urgent it is (the next forward needs it first).
    compress   None, "bf16", "f16" or "int8": the wire format between nodes (f32 gradients).
    name       prefix of the per-bucket tensor names ("<name>.bucket<i>"): int8 compression
               keeps its error-feedback residual per name, and diagnostics show them.
    average    True: every rank gets the mean (op avg); False: the sum.
    zero_copy  True: stage each bucket in a persistent arena buffer (one copy in; the result is
               handed to DDP straight from the arena). False: post the bucket's own memory and
               let libnodecomm copy it in and out.
    timeout    seconds before a bucket fails with nodecomm.Error (default: NODECOMM_TIMEOUT_SEC,
               else 300).
    """

    def __init__(self, priority=0, compress=None, name="ddp", average=True, zero_copy=True,
                 timeout=None):
        if compress is not None and str(compress).lower() not in _capi.COMPRESS:
            raise ValueError(f"HookState: unknown compress {compress!r}")
        self.priority = int(priority)
        self.compress = None if compress in (None, "none") else str(compress).lower()
        self.name = name
        self.average = average
        self.zero_copy = zero_copy
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


class _Completer:
    """One thread per process that polls the hook's requests and completes their futures.

    It polls (nc_test) rather than blocking in nc_wait on one request: buckets complete out of
    posting order under priorities, and a poll loop can stop promptly at finalize (which must
    not race with another call on the context)."""

    MIN_PAUSE = 50e-6
    MAX_PAUSE = 1e-3

    def __init__(self):
        self._cond = threading.Condition()
        self._pending = []  # [request, future, result, deadline]
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="nodecomm-ddp-completer",
                                        daemon=True)
        self._thread.start()

    def add(self, request, future, result, timeout):
        with self._cond:
            self._pending.append([request, future, result, time.monotonic() + timeout])
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
                for request, future, _, _ in pending:
                    future.set_exception(Error(_capi.ERR_NOT_INITIALIZED,
                                               "nodecomm.finalize() with the bucket in flight",
                                               request.description))
                return
            finished = []
            now = time.monotonic()
            for item in pending:
                request, future, result, deadline = item
                try:
                    if request.test():
                        future.set_result(result)
                        finished.append(item)
                    elif now > deadline:
                        future.set_exception(Error(_capi.ERR_TIMEOUT,
                                                   "DDP bucket not reduced in time",
                                                   request.description))
                        finished.append(item)
                except Error as e:
                    future.set_exception(e)
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
    daemon. Returns a torch.futures.Future whose value is the reduced bucket."""
    grads = _bucket_buffer(bucket)
    index = bucket.index()
    future = torch.futures.Future()
    name = f"{state.name}.bucket{index}"
    try:
        target = state.staging_buffer(index, grads) if state.zero_copy else None
        if target is not None:
            target.copy_(grads.view(-1))
        else:
            target = grads
        request = _core.allreduce(target, op="avg" if state.average else "sum",
                                  priority=state.priority + index, compress=state.compress,
                                  name=name)
    except Error as e:
        future.set_exception(e)
        return future
    state.buckets_posted += 1
    # DDP only reads the bucket's numel elements of the result, in the bucket's layout: a flat
    # view of the arena tensor is what it expects.
    _get_completer().add(request, future, target.view(grads.shape), state.timeout)
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
