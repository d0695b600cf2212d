"""nodecomm.torch.allreduce_hook without a daemon: the collective calls are replaced by fakes,
so what is checked is the hook's own logic. Buckets split into pieces, each piece's result
copied back into DDP's bucket, the future completing once every piece is back, and every
failure (a piece failing, a post refused, a piece timing out) becoming the future's
nodecomm.Error, with no hang.
Run: PYTHONPATH=build/python /usr/bin/python3 tests/python/hook_check.py
"""

import sys
import threading
import time

import torch

import nodecomm
import nodecomm.torch as nct
from nodecomm import _capi, _core

failures = 0


def check(ok, what):
    global failures
    print(f"{'ok' if ok else 'FAIL'}: {what}", flush=True)
    failures += not ok


class FakeRequest:
    """Completes on its `polls`-th test(): the 'reduction' doubles the posted tensor in place,
    or raises `error` instead."""

    def __init__(self, tensor, name, polls, error=None):
        self.tensor, self.name, self.polls, self.error = tensor, name, polls, error
        self.description = f"fake allreduce of '{name}'"

    def test(self):
        self.polls -= 1
        if self.polls > 0:
            return False
        if self.error is not None:
            raise self.error
        self.tensor.mul_(2)
        return True


class FakeCore:
    """Stands in for _core.allreduce; `fail_piece` names a piece whose result fails,
    `refuse_post` the post that raises, and `never` a piece that never completes."""

    def __init__(self, fail_piece=None, refuse_post=None, never=None):
        self.posts = []
        self.fail_piece, self.refuse_post, self.never = fail_piece, refuse_post, never

    def allreduce(self, tensor, op, priority, compress, name):
        if name == self.refuse_post:
            raise _capi.Error(_capi.ERR_INVALID_ARGUMENT, "refused by the fake", name)
        self.posts.append((name, tensor.numel(), priority, op))
        error = (_capi.Error(_capi.ERR_MISMATCH, "failed by the fake", name)
                 if name == self.fail_piece else None)
        return FakeRequest(tensor, name, 10**9 if name == self.never else 3, error)


class FakeBucket:
    def __init__(self, index, values):
        self._index, self._buffer = index, values

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer


def run_hook(core, numel, piece_mb, index=3, zero_copy=True, timeout=30.0, register=False):
    _core.allreduce = core.allreduce
    state = nct.HookState(piece_mb=piece_mb, zero_copy=zero_copy, timeout=timeout,
                          register=register)
    values = torch.arange(numel, dtype=torch.float32)
    grads = values.clone()
    future = nct.allreduce_hook(state, FakeBucket(index, grads))
    return state, values, grads, future


def wait(future, seconds=10.0):
    """The future's value, or the exception it was completed with; ('hang',) if neither."""
    done = threading.Event()
    future.then(lambda _: done.set())
    if not done.wait(seconds):
        return ("hang",)
    try:
        return future.value()
    except Exception as e:  # torch wraps the hook's exception
        return e


def main():
    # Staging buffers come from the arena; here, from ordinary memory.
    _core.alloc_tensor = lambda shape, dtype: torch.empty(shape, dtype=dtype)
    _core._ctx = object()
    real_allreduce = _core.allreduce

    for zero_copy in (True, False):
        core = FakeCore()
        numel = 1_000_003  # 4,000,012 bytes: 4 pieces of 1 MB, odd lengths
        state, values, grads, future = run_hook(core, numel, piece_mb=1.0, zero_copy=zero_copy)
        result = wait(future)
        check(result is grads, f"zero_copy={zero_copy}: the future's value is DDP's own bucket")
        check(isinstance(result, torch.Tensor) and torch.equal(result, values * 2),
              f"zero_copy={zero_copy}: every element of every piece came back")
        names = [p[0] for p in core.posts]
        check(names == [f"ddp.bucket3.{i}" for i in range(5)],
              f"zero_copy={zero_copy}: pieces named ddp.bucket3.0..4 ({names})")
        check(sum(p[1] for p in core.posts) == numel and
              max(p[1] for p in core.posts) * 4 <= 1_000_000,
              f"zero_copy={zero_copy}: pieces cover the bucket, each at most 1 MB")
        check({p[2] for p in core.posts} == {3} and {p[3] for p in core.posts} == {"avg"},
              "every piece has the bucket's priority and op avg")
        check(state.buckets_posted == 1, "one bucket counted as posted")

    # A registered bucket (here: one the fake says is shared memory) goes out in place.
    real_is_arena = _core.is_arena
    _core.is_arena = lambda obj: True
    core = FakeCore()
    numel = 1_000_003
    state, values, grads, future = run_hook(core, numel, piece_mb=1.0, register=True)
    check(wait(future) is grads and torch.equal(grads, values * 2) and len(core.posts) == 5 and
          not state._staging, "a registered bucket is reduced in place, without staging")
    _core.is_arena = real_is_arena

    core = FakeCore()
    _, values, grads, future = run_hook(core, 1000, piece_mb=4)
    check(wait(future) is grads and torch.equal(grads, values * 2) and
          [p[0] for p in core.posts] == ["ddp.bucket3"], "a small bucket is one operation")

    core = FakeCore()
    _, values, grads, future = run_hook(core, 3_000_000, piece_mb=0)
    check(wait(future) is grads and [p[0] for p in core.posts] == ["ddp.bucket3"],
          "piece_mb=0: the whole bucket is one operation")

    core = FakeCore(fail_piece="ddp.bucket3.2")
    _, _, _, future = run_hook(core, 1_000_003, piece_mb=1.0)
    result = wait(future)
    check(isinstance(result, Exception) and "failed by the fake" in str(result),
          f"a failed piece fails the bucket's future ({str(result)[:80]!r})")

    core = FakeCore(refuse_post="ddp.bucket3.1")
    _, _, _, future = run_hook(core, 1_000_003, piece_mb=1.0)
    result = wait(future)
    check(isinstance(result, Exception) and "refused by the fake" in str(result),
          "a refused post fails the future at once")
    time.sleep(0.2)  # the piece posted before it completes later, and is ignored
    check(len(core.posts) == 1, "no piece is posted after the refused one")

    core = FakeCore(never="ddp.bucket3.0")
    start = time.monotonic()
    _, _, _, future = run_hook(core, 1_000_003, piece_mb=1.0, timeout=0.3)
    result = wait(future)
    check(isinstance(result, Exception) and "not reduced in time" in str(result) and
          time.monotonic() - start < 5, "a piece that never completes times the bucket out")

    # finalize with a bucket in flight: the completer fails it rather than leaving DDP waiting.
    core = FakeCore(never="ddp.bucket3.0")
    _, _, _, future = run_hook(core, 1_000_003, piece_mb=1.0)
    nct._stop_completer()
    result = wait(future)
    check(isinstance(result, Exception) and "in flight" in str(result),
          "stopping the completion thread fails a bucket in flight")

    _core.allreduce = real_allreduce
    _core._ctx = None

    # The torch.distributed backend's Python side, without a daemon: registered once, its
    # options validated, and a clear error where the extension is missing.
    import importlib
    import torch.distributed as dist
    check(dist.Backend._plugins.get("NODECOMM") is not None, "importing nodecomm.torch "
          "registers the backend 'nodecomm'")
    importlib.reload(nct)  # a second import must not register again (torch would assert)
    check(dist.Backend("nodecomm") == "nodecomm", "Backend('nodecomm') resolves")
    for bad in ({"compress": "int8"}, {"compress": "zip"}, {"piece_mb": -1}):
        try:
            nct.Options(**bad)
            check(False, f"Options({bad}) is refused")
        except ValueError:
            check(True, f"Options({bad}) is refused")
    options = nct._options({"compress": "bf16", "piece_mb": 2})
    check(options.compress == "bf16" and options.piece_bytes == 2_000_000,
          "pg_options as a dict")
    saved = nct._torch_backend
    nct._torch_backend = None
    try:
        nct._create_backend(None)
        check(False, "the creator without the extension raises")
    except RuntimeError as e:
        check("libtorch-dev" in str(e), "the creator without the extension names what to install")
    nct._torch_backend = saved
    print(f"hook_check: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
