"""The nodecomm Python API under nodecomm-launch: every collective on numpy arrays and (when
torch is installed) CPU torch tensors, each element checked against a reference computed here
from every rank's inputs; odd counts; in place, out of place and allocated outputs; arena
(zero-copy) and ordinary (copy path) memory; a buffer-protocol object without numpy; and the
error paths (a library check and a daemon-detected mismatch, each raising nodecomm.Error with
the daemon's message).

    nodecomm-launch --nodes 2 --ranks-per-node 2 -- /usr/bin/python3 tests/python/api_check.py

Exit status 0 when every check passes; each failure is printed with rank and case.
"""

import array
import sys

import numpy as np

import nodecomm

try:
    import torch
except ImportError:
    torch = None

COUNTS = (1, 7, 4099)
NUMPY_DTYPES = ("float32", "float64", "int32", "int64")
TORCH_DTYPES = ("float32", "bfloat16", "float16", "int64")
failures = []
checks = 0


def inputs_of(rank, n, salt):
    """Rank `rank`'s input: small integers, exact in every dtype (bf16 included) and in every
    sum over a few ranks, so that references compare exactly."""
    i = np.arange(n, dtype=np.int64)
    return ((i * 7 + (rank + 1) * 13 + salt * 5) % 23 - 11).astype(np.float64)


def reduce_ref(values, op):
    stack = np.stack(values)
    if op == "sum":
        return stack.sum(axis=0)
    if op == "max":
        return stack.max(axis=0)
    if op == "min":
        return stack.min(axis=0)
    if op == "avg":
        return stack.sum(axis=0) / len(values)
    raise ValueError(op)


def make(kind, dtype, n, arena, values=None):
    """A buffer of n elements: numpy or torch, from the arena or ordinary memory."""
    if kind == "numpy":
        buf = nodecomm.alloc_array(n, dtype) if arena else np.empty(n, dtype=dtype)
        if values is not None:
            buf[:] = values
    else:
        tdtype = getattr(torch, dtype)
        buf = nodecomm.alloc_tensor(n, tdtype) if arena else torch.empty(n, dtype=tdtype)
        if values is not None:
            buf.copy_(torch.from_numpy(values))
    return buf


def as_f64(buf):
    if torch is not None and isinstance(buf, torch.Tensor):
        return buf.to(torch.float64).numpy()
    return np.asarray(buf, dtype=np.float64)


def check(case, got, want, rel=0.0):
    global checks
    checks += 1
    got = as_f64(got).ravel()
    if got.shape != want.shape:
        failures.append(f"{case}: {got.size} elements, expected {want.size}")
        return
    ok = np.abs(got - want) <= rel * np.abs(want) if rel else got == want
    if not ok.all():
        bad = int(np.argmax(~ok))
        failures.append(f"{case}: element {bad} is {got[bad]}, expected {want[bad]} "
                        f"({int((~ok).sum())} wrong)")


def run_collectives(kind, dtype, n, arena, placement, rank, size, salt):
    """One case per collective. placement: 'inplace', 'out' (separate output, same memory
    kind as the input), 'mixed' (the other memory kind) or 'default' (out=None allocates)."""
    tag = f"rank {rank}: {kind} {dtype} n={n} {'arena' if arena else 'heap'} {placement}"
    out_arena = (not arena) if placement == "mixed" else arena
    is_float = "float" in dtype
    mine = inputs_of(rank, n, salt)
    everyone = [inputs_of(r, n, salt) for r in range(size)]

    # allreduce: sum, max, and avg for floating types
    for op in ("sum", "max") + (("avg",) if is_float else ()):
        x = make(kind, dtype, n, arena, mine)
        if placement in ("inplace", "default"):
            result = nodecomm.allreduce(x, op=op, name=f"ar.{op}").wait()
            assert result is x
        else:
            out = make(kind, dtype, n, out_arena)
            result = nodecomm.allreduce(x, op=op, out=out, priority=1).wait()
            check(f"{tag} allreduce {op}: input untouched", x, mine)
        want = reduce_ref(everyone, op)
        # avg divides: allow rounding (half types are summed in f32 and rounded once).
        rel = 0.0 if op != "avg" else 1e-6 if dtype in ("float32", "float64") else 1e-2
        check(f"{tag} allreduce {op}", result, want, rel=rel)

    # broadcast from the last rank
    root = size - 1
    x = make(kind, dtype, n, arena, mine)
    if placement in ("inplace", "default"):
        result = nodecomm.broadcast(x, root=root).wait()
    else:
        result = nodecomm.broadcast(x, root=root, out=make(kind, dtype, n, out_arena)).wait()
    check(f"{tag} broadcast root {root}", result, everyone[root])

    # allgather
    want = np.concatenate(everyone)
    if placement == "inplace":
        out = make(kind, dtype, n * size, arena)
        out[rank * n:(rank + 1) * n] = make(kind, dtype, n, False, mine)
        result = nodecomm.allgather(out[rank * n:(rank + 1) * n], out=out).wait()
    elif placement == "default":
        result = nodecomm.allgather(make(kind, dtype, n, arena, mine)).wait()
        if arena and not nodecomm.is_arena(result):
            failures.append(f"{tag} allgather: allocated output of an arena input is not "
                            "in the arena")
    else:
        result = nodecomm.allgather(make(kind, dtype, n, arena, mine),
                                    out=make(kind, dtype, n * size, out_arena)).wait()
    check(f"{tag} allgather", result, want)

    # reduce_scatter (sum): inputs of n * size elements
    big_mine = inputs_of(rank, n * size, salt + 1)
    full = reduce_ref([inputs_of(r, n * size, salt + 1) for r in range(size)], "sum")
    want = full[rank * n:(rank + 1) * n]
    send = make(kind, dtype, n * size, arena, big_mine)
    if placement == "inplace":
        result = nodecomm.reduce_scatter(send, out=send[rank * n:(rank + 1) * n]).wait()
    elif placement == "default":
        result = nodecomm.reduce_scatter(send).wait()
    else:
        result = nodecomm.reduce_scatter(send, out=make(kind, dtype, n, out_arena)).wait()
    check(f"{tag} reduce_scatter", result, want)

    # reduce (min) to rank 0, and alltoall, out of place / allocated only
    x = make(kind, dtype, n, arena, mine)
    result = nodecomm.reduce(x, root=0, op="min").wait()
    if rank == 0:
        check(f"{tag} reduce min", result, reduce_ref(everyone, "min"))
    send = make(kind, dtype, n * size, arena, big_mine)
    out = None if placement in ("inplace", "default") else make(kind, dtype, n * size, out_arena)
    result = nodecomm.alltoall(send, out=out).wait()
    want = np.concatenate([inputs_of(r, n * size, salt + 1)[rank * n:(rank + 1) * n]
                           for r in range(size)])
    check(f"{tag} alltoall", result, want)


def check_error_paths(rank):
    global checks
    # Refused by the library before reaching the daemon: avg of integers.
    try:
        nodecomm.allreduce(np.ones(3, dtype=np.int32), op="avg", name="ints").wait()
        failures.append(f"rank {rank}: avg of i32 did not raise")
    except nodecomm.Error as e:
        checks += 1
        if e.status != nodecomm.ERR_INVALID_ARGUMENT or "floating" not in e.daemon_message \
                or "'ints'" not in str(e):
            failures.append(f"rank {rank}: avg of i32 raised {e!r}")
    # Python-side argument checks.
    for bad, exc in ((np.ones((4, 4), np.float32)[:, 0], ValueError),
                     (np.ones(3, np.complex64), TypeError), (object(), TypeError)):
        try:
            nodecomm.allreduce(bad)
            failures.append(f"rank {rank}: {type(bad).__name__} did not raise")
        except exc:
            checks += 1
    # A mismatch the daemon detects: local ranks post different counts. The communicator is
    # unusable afterwards, so this comes last.
    count = 5 + nodecomm.local_rank() % 2
    try:
        nodecomm.allreduce(np.ones(count, np.float32), name="mismatched").wait(timeout=120)
        failures.append(f"rank {rank}: mismatched allreduce did not raise")
    except nodecomm.Error as e:
        checks += 1
        # This node's daemon reports the mismatch, or the other node's does first (then it
        # arrives as a lost peer); either way the message lists what each rank posted.
        if e.status not in (nodecomm.ERR_MISMATCH, nodecomm.ERR_PEER_LOST) \
                or "posted allreduce f32 sum count" not in e.daemon_message:
            failures.append(f"rank {rank}: mismatch raised {e!r}")


def main():
    global checks
    try:
        nodecomm.world_rank()
        failures.append("world_rank() before init did not raise")
    except nodecomm.Error as e:
        checks += 1
        if e.status != nodecomm.ERR_NOT_INITIALIZED:
            failures.append(f"world_rank() before init raised {e!r}")
    nodecomm.init(timeout=120)
    rank, size = nodecomm.world_rank(), nodecomm.world_size()
    if nodecomm.local_size() % 2 == 1 and nodecomm.node_count() > 1:
        print("api_check: the mismatch check needs even local sizes on multi-node layouts")

    salt = 0
    kinds = [("numpy", NUMPY_DTYPES)] + ([("torch", TORCH_DTYPES)] if torch else [])
    for kind, dtypes in kinds:
        for dtype in dtypes:
            for n in COUNTS:
                for arena in (True, False):
                    for placement in ("inplace", "out", "mixed", "default"):
                        salt += 1
                        run_collectives(kind, dtype, n, arena, placement, rank, size, salt)

    # No numpy/torch objects: array.array through the buffer protocol (copy path).
    buf = array.array("d", inputs_of(rank, 7, 99).tolist())
    nodecomm.allreduce(buf).wait()
    check(f"rank {rank}: array.array allreduce", np.array(buf),
          reduce_ref([inputs_of(r, 7, 99) for r in range(size)], "sum"))

    # Non-blocking: several requests in flight, completed by test() polling, then wait_all.
    xs = [make("numpy", "float32", 4099, i % 2 == 0, inputs_of(rank, 4099, i))
          for i in range(8)]
    reqs = [nodecomm.allreduce(x, priority=i, name=f"batch{i}") for i, x in enumerate(xs)]
    while not all(r.test() for r in reqs):
        pass
    for i, x in enumerate(nodecomm.wait_all(reqs)):
        check(f"rank {rank}: batch {i}", x,
              reduce_ref([inputs_of(r, 4099, i) for r in range(size)], "sum"))
    nodecomm.barrier().wait()

    # Arena blocks go back when their arrays die.
    total, free_before = nodecomm.arena_info()
    big = nodecomm.alloc_array(1 << 20, "float32")
    _, free_during = nodecomm.arena_info()
    del big
    _, free_after = nodecomm.arena_info()
    checks += 1
    if not free_during < free_before or free_after != free_before:
        failures.append(f"rank {rank}: arena free bytes {free_before} -> {free_during} -> "
                        f"{free_after} around alloc_array/del")

    check_error_paths(rank)
    nodecomm.finalize()
    for failure in failures[:20]:
        print(f"FAIL {failure}", file=sys.stderr)
    print(f"api_check rank {rank}/{size}: {checks} checks, {len(failures)} failures "
          f"(torch {'yes' if torch else 'no'})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
