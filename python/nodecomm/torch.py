"""PyTorch integration: the torch.distributed backend "nodecomm", and a DistributedDataParallel
communication hook that averages gradient buckets through nodecommd.

The backend (any PyTorch program, no hook):

    import torch.distributed as dist
    import nodecomm.torch                         # registers the backend
    dist.init_process_group("nodecomm")           # env:// as nodecomm-launch/torchrun set it
    ddp = DistributedDataParallel(model)          # DDP, collectives, barriers: all via nodecommd

Every collective torch has for CPU tensors goes through the process's one nodecomm context
(nodecomm.init() is called on first use). Subgroups: nodecomm.torch.new_group(ranks), called
on every rank. Options (pg_options=nodecomm.torch.Options(...), or the environment):
compress="bf16"/"f16" for f32 sum/avg allreduces (NODECOMM_TORCH_COMPRESS), piece_mb
(NODECOMM_TORCH_PIECE_MB, default 4), priority.

The hook (per-bucket priorities, int8 compression), on top of either backend:

    import nodecomm, nodecomm.torch
    nodecomm.init()
    nodecomm.torch.init_process_group()          # gloo (or backend="nodecomm") for DDP's setup
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(nodecomm.torch.HookState(compress="bf16"),
                           nodecomm.torch.allreduce_hook)

The hook posts each bucket as soon as backward has filled it and returns at once; the daemon
moves the data while backward computes the next buckets. A background thread completes the
returned futures; DDP waits for them at the end of backward. DDP still needs a process group
for its own setup traffic (the parameter broadcast at construction, the bucket layout after the
first step); gradients never touch it once the hook is registered.
"""

import os
import threading
import time
import uuid
import warnings

import torch

from . import _capi, _core
from ._capi import Error

__all__ = ["HookState", "Options", "allreduce_hook", "backend_available", "init_process_group",
           "new_group", "register_tensor", "rendezvous_file"]


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


def init_process_group(backend="gloo", path=None, timeout=300, pg_options=None):
    """torch.distributed.init_process_group on nodecomm's world rank and size, with a
    file-store rendezvous (`path`, or rendezvous_file()): needs nothing but nodecomm's own
    environment. backend="nodecomm" makes the nodecomm backend the default group; "gloo"
    (the default) is DDP's setup traffic when gradients go through allreduce_hook, and the
    reference run."""
    import datetime

    import torch.distributed as dist
    if path is None:
        path = rendezvous_file(backend)
    extra = {"pg_options": pg_options} if pg_options is not None else {}
    dist.init_process_group(backend, init_method=f"file://{path}",
                            rank=_core.world_rank(), world_size=_core.world_size(),
                            timeout=datetime.timedelta(seconds=timeout), **extra)
    return path


# ---- the torch.distributed backend "nodecomm" ----------------------------------------------
# The process group is C++ (python/torch_backend, the extension nodecomm._torch_backend); it
# shares the context that _core holds. _core is imported first, so ctypes has loaded
# libnodecomm before the extension asks for it by soname: one library, one context.
try:
    from . import _torch_backend
    _backend_import_error = None
except ImportError as _e:  # built without libtorch-dev / pybind11-dev
    _torch_backend, _backend_import_error = None, _e

_PIECE_MB_DEFAULT = 4


def backend_available():
    """True if the extension with the "nodecomm" backend is built and loads; else the reason
    is in backend_unavailable_reason()."""
    return _torch_backend is not None


def backend_unavailable_reason():
    return None if _torch_backend is not None else str(_backend_import_error)


class Options:
    """pg_options for the "nodecomm" backend (init_process_group or new_group).

    compress   None, "bf16" or "f16": wire format between nodes for f32 sum/avg allreduces
               (DDP's gradient buckets). Default: NODECOMM_TORCH_COMPRESS, else none. int8
               needs a name per tensor, so it is the hook's (HookState(compress="int8")).
    piece_mb   allreduce, broadcast and reduce are posted in pieces of at most this many MB,
               so a 250 MB broadcast (DDP's parameter sync) fits the arena and its pieces
               pipeline. Default: NODECOMM_TORCH_PIECE_MB, else 4 (as the hook). 0: one
               operation.
    priority   the group's operations' priority (the `direct` policy sends higher first).
    register   True: a heap tensor of 1 MB or more that is allreduced a second time (DDP's
               gradient buckets) has its storage moved into shared memory in place and
               registered with the daemon, which then reduces it without a copy, as the hook's
               HookState(register=True). Tensors already in shared memory (share_memory_(),
               alloc_tensor) are zero-copy regardless. Default: NODECOMM_TORCH_REGISTER
               ("0" turns it off), else True.
    """

    def __init__(self, compress=None, piece_mb=None, priority=0, register=None):
        env = os.environ
        if compress is None:
            compress = env.get("NODECOMM_TORCH_COMPRESS") or None
        self.compress = None if compress in (None, "none", "") else str(compress).lower()
        if self.compress not in (None, "bf16", "f16"):
            raise ValueError(f"nodecomm.torch.Options: compress {compress!r}: none, bf16 or f16 "
                             "(int8 is the hook's: HookState(compress='int8'))")
        if piece_mb is None:
            piece_mb = float(env.get("NODECOMM_TORCH_PIECE_MB") or _PIECE_MB_DEFAULT)
        if piece_mb < 0:
            raise ValueError(f"nodecomm.torch.Options: piece_mb must be >= 0, not {piece_mb!r}")
        self.piece_mb = piece_mb
        self.priority = int(priority)
        if register is None:
            register = env.get("NODECOMM_TORCH_REGISTER", "1") not in ("0", "false", "no", "off")
        self.register = bool(register)

    @property
    def piece_bytes(self):
        return int(self.piece_mb * 1e6)

    def __repr__(self):
        return (f"nodecomm.torch.Options(compress={self.compress!r}, piece_mb={self.piece_mb}, "
                f"priority={self.priority}, register={self.register})")


# Communicators split by new_group() on every rank, waiting for dist.new_group's creator call
# on the members: sorted ranks -> [comm, ...].
_pending_comms = {}


def _ensure_init():
    """nodecomm.init() from the environment, unless the program already called it. Under
    torchrun (NODECOMM_LOCAL_RANK unset), torch's variables say where this process sits:
    LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the node), WORLD_SIZE / LOCAL_WORLD_SIZE (the
    nodes) and TORCHELASTIC_RUN_ID (the job), as docs/OPERATIONS.md's torchrun recipe maps
    them."""
    if _core.initialized():
        return
    env = os.environ
    if "NODECOMM_LOCAL_RANK" not in env and "LOCAL_RANK" in env:
        env["NODECOMM_LOCAL_RANK"] = env["LOCAL_RANK"]
        if "LOCAL_WORLD_SIZE" in env:
            env.setdefault("NODECOMM_LOCAL_SIZE", env["LOCAL_WORLD_SIZE"])
            if "WORLD_SIZE" in env:
                env.setdefault("NODECOMM_NODES",
                               str(int(env["WORLD_SIZE"]) // int(env["LOCAL_WORLD_SIZE"])))
        if "GROUP_RANK" in env:
            env.setdefault("NODECOMM_NODE", env["GROUP_RANK"])
        if "TORCHELASTIC_RUN_ID" in env:
            env.setdefault("NODECOMM_JOB", env["TORCHELASTIC_RUN_ID"])
    _core.init()


def _options(pg_options):
    if pg_options is None:
        return Options()
    if isinstance(pg_options, Options):
        return pg_options
    if isinstance(pg_options, dict):
        return Options(**pg_options)
    raise TypeError(f"nodecomm backend: pg_options must be nodecomm.torch.Options or a dict, "
                    f"not {type(pg_options).__name__}")


def _create_backend(backend_opts, pg_options=None):
    """torch.distributed's creator for "nodecomm" (extended API): runs on the group's members
    inside init_process_group / new_group."""
    if _torch_backend is None:
        raise RuntimeError(f"nodecomm: the torch backend is not built ({_backend_import_error});"
                           " install libtorch-dev, pybind11-dev and python3-dev and rebuild")
    options = _options(pg_options)
    _ensure_init()
    ctx = _core._context("torch backend")
    world_rank, world_size = ctx.rank, ctx.size
    rank, size = backend_opts.group_rank, backend_opts.group_size
    ranks = sorted(backend_opts.global_ranks_in_group) or list(range(size))
    name = backend_opts.group_id if backend_opts.global_ranks_in_group else "default"
    if ranks == list(range(world_size)):
        if not backend_opts.global_ranks_in_group and (rank, size) != (world_rank, world_size):
            raise RuntimeError(
                f"nodecomm: torch rank {rank}/{size} but nodecomm world rank "
                f"{world_rank}/{world_size} (the daemons number the ranks by node): pass "
                "rank=nodecomm.world_rank(), world_size=nodecomm.world_size(), run under "
                "nodecomm-launch (which sets RANK and WORLD_SIZE), or use "
                "nodecomm.torch.init_process_group(backend='nodecomm')")
        # A duplicate of the world, made by every rank here: the group's operations keep their
        # own order, apart from the hook's and the array API's on the world communicator.
        comm = _torch_backend._comm_dup(ctx.handle.value, 0)
    else:
        waiting = _pending_comms.get(tuple(ranks))
        if not waiting:
            raise RuntimeError(
                f"nodecomm: a subgroup of ranks {ranks} needs nodecomm.torch.new_group(ranks), "
                "called on every rank (nodecomm splits the world collectively, and "
                "torch.distributed.new_group runs the backend only on the members)")
        comm = waiting.pop(0)
    return _torch_backend.ProcessGroupNodecomm(
        ctx.handle.value, comm, rank, size, backend_opts.timeout, backend_opts.store, name,
        options.compress or "", options.piece_bytes, options.priority, options.register)


def new_group(ranks=None, timeout=None, pg_options=None):
    """torch.distributed.new_group(ranks, backend="nodecomm"), for any subset of the world.
    Every rank must call it (as with dist.new_group), in the same order: the nodecomm
    communicator is split on all ranks first. Returns the group (GroupMember.NON_GROUP_MEMBER
    on the others)."""
    import torch.distributed as dist
    if _torch_backend is None:
        raise RuntimeError(f"nodecomm: the torch backend is not built ({_backend_import_error})")
    _ensure_init()
    ctx = _core._context("new_group")
    world_size, me = ctx.size, ctx.rank
    members = sorted(set(range(world_size) if ranks is None else ranks))
    if members[0] < 0 or members[-1] >= world_size:
        raise ValueError(f"nodecomm.torch.new_group: ranks {members} outside 0..{world_size - 1}")
    if len(members) < world_size:
        member = me in members
        comm = _torch_backend._comm_split(ctx.handle.value, 0,
                                          0 if member else _torch_backend.UNDEFINED,
                                          members.index(me) if member else 0)
        if member:
            _pending_comms.setdefault(tuple(members), []).append(comm)
    kwargs = {"ranks": members, "backend": "nodecomm", "pg_options": pg_options}
    if timeout is not None:
        import datetime
        kwargs["timeout"] = (timeout if isinstance(timeout, datetime.timedelta)
                             else datetime.timedelta(seconds=timeout))
    return dist.new_group(**kwargs)


def _shutdown_backend():
    if _torch_backend is not None:
        _torch_backend._shutdown()


_core._before_finalize.append(_shutdown_backend)

import torch.distributed as _dist  # noqa: E402

if _dist.is_available() and "NODECOMM" not in _dist.Backend._plugins:
    _dist.Backend.register_backend("nodecomm", _create_backend, extended_api=True)
