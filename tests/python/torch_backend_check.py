"""The torch.distributed backend "nodecomm", run under nodecomm-launch (any layout): every
collective torch has for CPU tensors, through dist.init_process_group("nodecomm") with no
arguments (nodecomm-launch sets torch's env:// variables), compared element by element with
the same call on a gloo group in the same processes and with an independent reference computed
here from every rank's inputs (which are functions of the rank). Then the error paths,
subgroups, zero copy and pieces. Exit 77 (skip) without torch or without the backend."""

import datetime
import os
import sys
import time
import warnings

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    print(f"skip: torch is not installed for {sys.executable}: {e}")
    sys.exit(77)

import nodecomm
import nodecomm.torch as nct

if not nct.backend_available():
    print(f"skip: the nodecomm torch backend is not built: {nct.backend_unavailable_reason()}")
    sys.exit(77)

warnings.filterwarnings("ignore", message=".*all_reduce_coalesced will be deprecated")
TIMEOUT = datetime.timedelta(seconds=60)
dist.init_process_group("nodecomm", timeout=TIMEOUT)
RANK, SIZE = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "nodecomm", dist.get_backend()
assert (RANK, SIZE) == (nodecomm.world_rank(), nodecomm.world_size()), (RANK, SIZE)
GLOO = dist.new_group(backend="gloo", timeout=TIMEOUT)
FAILURES = []
CHECKS = [0]

REDUCE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                 torch.int64, torch.int8, torch.uint8]
MOVE_DTYPES = REDUCE_DTYPES + [torch.bool, torch.int16, torch.complex64]
SIZES = [1, 13, 4099]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}


def data(rank, n, dtype, seed=0, small=False):
    """Rank `rank`'s input: small integers (exact in every dtype, and in their sums)."""
    base = (torch.arange(n, dtype=torch.int64) * 7 + rank * 3 + seed)
    values = base % 2 + 1 if small else base % 5 + 1
    if dtype == torch.bool:
        return (values % 2 == 0)
    if dtype.is_complex:
        return torch.complex(values.float(), (values * 2).float()).to(dtype)
    return values.to(dtype)


def reference(op, n, dtype, seed=0, small=False):
    """The reduction of every rank's input, in float64 (int64 for integers), cast back."""
    stack = torch.stack([data(r, n, dtype, seed, small).to(
        torch.complex128 if dtype.is_complex else torch.float64) for r in range(SIZE)])
    if op == "sum":
        out = stack.sum(0)
    elif op == "product":
        out = stack.prod(0)
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    elif op == "avg":
        out = stack.mean(0)
    return out.to(dtype)


def tolerance(dtype):
    return {torch.float16: 1e-3, torch.bfloat16: 1e-2}.get(dtype, 1e-6)


def check(name, ours, expected, exact=True):
    CHECKS[0] += 1
    if isinstance(ours, (list, tuple)):
        assert len(ours) == len(expected), (name, len(ours), len(expected))
        for i, (a, b) in enumerate(zip(ours, expected)):
            check(f"{name}[{i}]", a, b, exact)
        CHECKS[0] -= 1
        return
    ok = ours.dtype == expected.dtype and ours.shape == expected.shape
    if ok:
        if exact or not (ours.is_floating_point() or ours.is_complex()):
            ok = torch.equal(ours, expected)
        else:
            tol = tolerance(ours.dtype)
            wide = torch.complex128 if ours.is_complex() else torch.float64
            ok = torch.allclose(ours.to(wide), expected.to(wide), rtol=tol, atol=tol)
    if not ok:
        bad = (ours != expected).nonzero()[:5].tolist() if ours.shape == expected.shape else "-"
        FAILURES.append(f"rank {RANK}: {name}: {ours.dtype}{tuple(ours.shape)} vs "
                        f"{expected.dtype}{tuple(expected.shape)}; first bad {bad}; "
                        f"ours {ours.flatten()[:6].tolist()} expected "
                        f"{expected.flatten()[:6].tolist()}")


def both(name, run, expected=None, exact=True):
    """run(group, async_op) -> result tensors; on nodecomm (sync, then async via the future
    for the element-wise ops) and on gloo, each compared with `expected` (when given) and
    nodecomm's with gloo's (when gloo has the call)."""
    ours = run(None, False)
    if expected is not None:
        check(f"{name} vs reference", ours, expected, exact)
    try:
        theirs = run(GLOO, False)
    except Exception as e:  # gloo lacks some dtypes and ops (avg, reduce_scatter, ...)
        theirs = None
        if RANK == 0 and name.split(" ")[0] not in both.gloo_skips:
            both.gloo_skips.add(name.split(" ")[0])
            print(f"note: gloo cannot do {name}: {str(e).splitlines()[0][:100]}")
    if theirs is not None:
        check(f"{name} vs gloo", ours, theirs, exact)


both.gloo_skips = set()
REDOPS = {"sum": dist.ReduceOp.SUM, "product": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
          "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def wait(work, async_op):
    if async_op:
        value = work.get_future().wait()
        assert isinstance(value, list), type(value)
    return work


# ---- element-wise: all_reduce, all_reduce_coalesced, broadcast, reduce ----------------------
started = time.monotonic()
for dtype in REDUCE_DTYPES:
    for n in SIZES:
        for opname in (["sum", "product", "min", "max"] if n == 13 else ["sum"]) + (
                ["avg"] if dtype in FLOATS and n != 1 else []):
            small = opname == "product"

            def run(group, async_op, dtype=dtype, n=n, opname=opname, small=small):
                t = data(RANK, n, dtype, 1, small)
                work = dist.all_reduce(t, op=REDOPS[opname], group=group, async_op=True)
                if async_op:
                    return work.get_future().wait()[0]
                work.wait()
                return t
            both(f"all_reduce {opname} {dtype} n={n}", run,
                 reference(opname, n, dtype, 1, small), exact=opname != "avg")
            # The future's value is the tensor itself (DDP reads it with toTensorVector).
            t = data(RANK, n, dtype, 1, small)
            value = dist.all_reduce(t, op=REDOPS[opname], async_op=True).get_future().wait()
            check(f"all_reduce future {opname} {dtype} n={n}", value[0],
                  reference(opname, n, dtype, 1, small), exact=opname != "avg")
            assert value[0].data_ptr() == t.data_ptr() or not t.is_contiguous()

for dtype in [torch.complex64, torch.bool]:
    for opname in (["sum", "avg"] if dtype.is_complex else ["min", "max", "product"]):
        t = data(RANK, 13, dtype, 2)
        dist.all_reduce(t, op=REDOPS[opname])
        check(f"all_reduce {opname} {dtype}", t, reference(opname, 13, dtype, 2),
              exact=opname != "avg")

for dtype in [torch.float32, torch.int64, torch.bfloat16]:
    def run(group, async_op, dtype=dtype):
        ts = [data(RANK, n, dtype, 3) for n in (5, 1, 300)]
        dist.all_reduce_coalesced(ts, group=group)
        return ts
    both(f"all_reduce_coalesced {dtype}", run,
         [reference("sum", n, dtype, 3) for n in (5, 1, 300)])

for dtype in MOVE_DTYPES:
    for n in SIZES:
        root = SIZE - 1

        def run(group, async_op, dtype=dtype, n=n, root=root):
            t = data(RANK, n, dtype, 4)
            wait(dist.broadcast(t, root, group=group, async_op=True), async_op).wait()
            return t
        both(f"broadcast {dtype} n={n}", run, data(root, n, dtype, 4))

for dtype in REDUCE_DTYPES:
    for n in SIZES:
        root = 1 % SIZE

        def run(group, async_op, dtype=dtype, n=n, root=root):
            t = data(RANK, n, dtype, 5)
            dist.reduce(t, root, group=group)
            # gloo uses non-roots' tensors as scratch (torch leaves them undefined); nodecomm
            # leaves them as they were, which the reference checks.
            return t if RANK == root or group is None else data(RANK, n, dtype, 5)
        both(f"reduce {dtype} n={n}", run,
             reference("sum", n, dtype, 5) if RANK == root else data(RANK, n, dtype, 5))

# ---- gathers, scatters, reduce_scatter, all_to_all -----------------------------------------
for dtype in MOVE_DTYPES:
    for n in SIZES:
        everyone = [data(r, n, dtype, 6) for r in range(SIZE)]

        def run(group, async_op, dtype=dtype, n=n):
            outs = [torch.empty(n, dtype=dtype) for _ in range(SIZE)]
            wait(dist.all_gather(outs, data(RANK, n, dtype, 6), group=group, async_op=True),
                 async_op).wait()
            return outs
        both(f"all_gather {dtype} n={n}", run, everyone)

        def run(group, async_op, dtype=dtype, n=n):
            out = torch.empty(SIZE * n, dtype=dtype)
            dist.all_gather_into_tensor(out, data(RANK, n, dtype, 6), group=group)
            return out
        both(f"all_gather_into_tensor {dtype} n={n}", run, torch.cat(everyone))

        # Outputs that are one block already (chunks): the zero-copy path, in place too.
        block = torch.empty(SIZE * n, dtype=dtype)
        mine = block[RANK * n:(RANK + 1) * n]
        mine.copy_(data(RANK, n, dtype, 6))
        dist.all_gather(list(block.split(n)), mine)
        check(f"all_gather in place {dtype} n={n}", block, torch.cat(everyone))

        root = 0

        def run(group, async_op, dtype=dtype, n=n, root=root):
            outs = [torch.empty(n, dtype=dtype) for _ in range(SIZE)] if RANK == root else None
            dist.gather(data(RANK, n, dtype, 7), outs, dst=root, group=group)
            return outs if RANK == root else []
        both(f"gather {dtype} n={n}", run,
             [data(r, n, dtype, 7) for r in range(SIZE)] if RANK == root else [])

        root = SIZE - 1

        def run(group, async_op, dtype=dtype, n=n, root=root):
            out = torch.empty(n, dtype=dtype)
            ins = [data(r, n, dtype, 8) for r in range(SIZE)] if RANK == root else None
            dist.scatter(out, ins, src=root, group=group)
            return out
        both(f"scatter {dtype} n={n}", run, data(RANK, n, dtype, 8))

        def run(group, async_op, dtype=dtype, n=n):
            inp = torch.cat([data(RANK, n, dtype, 9 + j) for j in range(SIZE)])
            out = torch.empty(SIZE * n, dtype=dtype)
            dist.all_to_all_single(out, inp, group=group)
            return out
        both(f"all_to_all_single {dtype} n={n}", run,
             torch.cat([data(r, n, dtype, 9 + RANK) for r in range(SIZE)]))

        def run(group, async_op, dtype=dtype, n=n):
            outs = [torch.empty(n, dtype=dtype) for _ in range(SIZE)]
            dist.all_to_all(outs, [data(RANK, n, dtype, 9 + j) for j in range(SIZE)],
                            group=group)
            return outs
        both(f"all_to_all {dtype} n={n}", run,
             [data(r, n, dtype, 9 + RANK) for r in range(SIZE)])

    # Uneven: all_gather of different sizes (gloo refuses), all_to_all_single with splits.
    outs = [torch.empty(3 + r, dtype=dtype) for r in range(SIZE)]
    dist.all_gather(outs, data(RANK, 3 + RANK, dtype, 10))
    check(f"all_gather uneven {dtype}", outs, [data(r, 3 + r, dtype, 10) for r in range(SIZE)])

    def splits(src):  # rows rank `src` sends to each rank
        return [(src + j) % 3 + (1 if j == 0 else 0) for j in range(SIZE)]
    rows_in = splits(RANK)
    rows_out = [splits(r)[RANK] for r in range(SIZE)]

    def rows(src, dst):  # what `src` sends to `dst`: (rows, 2) tensor
        count = splits(src)[dst]
        return data(src * 100 + dst, count * 2, dtype, 11).view(count, 2)

    def run(group, async_op, dtype=dtype):
        inp = torch.cat([rows(RANK, j) for j in range(SIZE)])
        out = torch.empty(sum(rows_out), 2, dtype=dtype)
        dist.all_to_all_single(out, inp, rows_out, rows_in, group=group)
        return out
    both(f"all_to_all_single uneven {dtype}", run,
         torch.cat([rows(r, RANK) for r in range(SIZE)]))

for dtype in REDUCE_DTYPES:
    for n in SIZES:
        def run(group, async_op, dtype=dtype, n=n):
            out = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(out, [data(RANK, n, dtype, 12 + j) for j in range(SIZE)],
                                group=group)
            return out
        both(f"reduce_scatter {dtype} n={n}", run, reference("sum", n, dtype, 12 + RANK))

        def run(group, async_op, dtype=dtype, n=n):
            out = torch.empty(n, dtype=dtype)
            inp = torch.cat([data(RANK, n, dtype, 12 + j) for j in range(SIZE)])
            dist.reduce_scatter_tensor(out, inp, group=group)
            return out
        both(f"reduce_scatter_tensor {dtype} n={n}", run, reference("sum", n, dtype, 12 + RANK))
print(f"rank {RANK}: collectives over {len(MOVE_DTYPES)} dtypes: {CHECKS[0]} checks, "
      f"{time.monotonic() - started:.1f} s", flush=True)

# ---- non-contiguous tensors (copied like gloo) ----------------------------------------------
m = data(RANK, 35, torch.float32, 13).view(5, 7).t()
assert not m.is_contiguous()
dist.all_reduce(m)
check("all_reduce transposed", m, reference("sum", 35, torch.float32, 13).view(5, 7).t())
m = data(RANK, 35, torch.int64, 14).view(5, 7).t()
dist.broadcast(m, 0)
check("broadcast transposed", m, data(0, 35, torch.int64, 14).view(5, 7).t())
outs = [torch.empty(7, 5, dtype=torch.float64).t() for _ in range(SIZE)]
dist.all_gather(outs, data(RANK, 35, torch.float64, 15).view(5, 7)[:, :].t().contiguous().t())
check("all_gather transposed",
      outs, [data(r, 35, torch.float64, 15).view(5, 7) for r in range(SIZE)])
out = torch.empty(7, 5, dtype=torch.int32).t()
dist.reduce_scatter(out, [data(RANK, 35, torch.int32, 16 + j).view(7, 5).t() for j in range(SIZE)])
check("reduce_scatter transposed", out, reference("sum", 35, torch.int32, 16 + RANK).view(7, 5).t())
sl = data(RANK, 40, torch.float32, 17)[::2]  # strided slice
dist.all_reduce(sl, op=dist.ReduceOp.MAX)
check("all_reduce strided", sl, reference("max", 40, torch.float32, 17)[::2])

# ---- empty tensors: every rank posts, nothing moves ---------------------------------------------
empty = torch.empty(0)
dist.all_reduce(empty)
dist.broadcast(empty, 0)
dist.all_gather([torch.empty(0) for _ in range(SIZE)], empty)
dist.reduce_scatter(torch.empty(0), [torch.empty(0) for _ in range(SIZE)])
dist.all_to_all_single(torch.empty(0), torch.empty(0))
dist.gather(empty, [torch.empty(0) for _ in range(SIZE)] if RANK == 0 else None, dst=0)

# ---- objects, barrier, monitored_barrier -----------------------------------------------------
objs = [None] * SIZE
dist.all_gather_object(objs, {"rank": RANK, "name": f"r{RANK}" * (RANK + 1)})
assert objs == [{"rank": r, "name": f"r{r}" * (r + 1)} for r in range(SIZE)], objs
lst = [RANK, "x" * 100] if RANK == 0 else [None, None]
dist.broadcast_object_list(lst, 0)
assert lst == [0, "x" * 100], lst
dist.barrier()
dist.group.WORLD.monitored_barrier(datetime.timedelta(seconds=30), wait_all_ranks=True)
print(f"rank {RANK}: objects, barrier, monitored_barrier ok", flush=True)


# ---- subgroups --------------------------------------------------------------------------------
def expect_error(what, fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        if not all(s in text for s in needles):
            FAILURES.append(f"rank {RANK}: {what}: error lacks {needles}: {text[:300]}")
        return text
    FAILURES.append(f"rank {RANK}: {what}: no error")
    return ""


members = [0, SIZE - 1]
sub = nct.new_group(members)
gloo_sub = dist.new_group(members, backend="gloo")
world_dup = nct.new_group()  # world-sized: a duplicate of the world communicator
if RANK in members:
    assert dist.get_backend(sub) == "nodecomm"
    assert dist.get_rank(sub) == members.index(RANK), dist.get_rank(sub)
    t, u = data(RANK, 101, torch.float32, 18), data(RANK, 101, torch.float32, 18)
    dist.all_reduce(t, group=sub)
    dist.all_reduce(u, group=gloo_sub)
    check("subgroup all_reduce vs gloo", t, u)
    check("subgroup all_reduce", t, sum(data(r, 101, torch.float32, 18) for r in members))
    outs = [torch.empty(4, dtype=torch.int64) for _ in members]
    dist.all_gather(outs, data(RANK, 4, torch.int64, 19), group=sub)
    check("subgroup all_gather", outs, [data(r, 4, torch.int64, 19) for r in members])
else:
    assert sub == dist.GroupMember.NON_GROUP_MEMBER
t = data(RANK, 9, torch.int64, 20)
dist.all_reduce(t, group=world_dup, op=dist.ReduceOp.MAX)
check("world-sized new_group", t, reference("max", 9, torch.int64, 20))

# ---- zero copy and pieces ----------------------------------------------------------------------
# A heap tensor allreduced twice moves into shared memory (registered with the daemon).
big = data(RANK, 1 << 20, torch.float32, 21)  # 4 MB
first = big.data_ptr()
dist.all_reduce(big)
dist.all_reduce(big)
moved = big.data_ptr() != first
maps = open("/proc/self/maps").read()
in_memfd = any("/memfd:nodecomm-torch-storage" in line
               and int(line.split("-")[0], 16) <= big.data_ptr() < int(line.split()[0].split("-")[1], 16)
               for line in maps.splitlines() if "memfd:" in line)
if not (moved and in_memfd):
    FAILURES.append(f"rank {RANK}: a 4 MB tensor allreduced twice is not in registered shared "
                    f"memory (moved {moved}, memfd {in_memfd})")
check("allreduce twice (moved to shared memory)", big,
      reference("sum", 1 << 20, torch.float32, 21) * SIZE)

# With the arena nearly full, shared memory still works and the heap copy path does not.
total, free = nodecomm.arena_info()
hold = []
while free > (2 << 20):
    hold.append(nodecomm.alloc_tensor(min(free - (1 << 20), 8 << 20) // 4, torch.float32))
    free = nodecomm.arena_info()[1]
shared = data(RANK, 1 << 20, torch.float32, 22).share_memory_()
dist.all_reduce(shared)
check("share_memory_() tensor with a full arena (zero copy)", shared,
      reference("sum", 1 << 20, torch.float32, 22))
no_move = nct.new_group(pg_options=nct.Options(register=False))
heap = data(RANK, 1 << 20, torch.float32, 23)
expect_error("heap tensor with a full arena",
             lambda: dist.all_reduce(heap, group=no_move), "out of memory", "NODECOMM_ARENA_BYTES")
hold.clear()
nodecomm.arena_info()  # returns the dead blocks to the arena

# Bigger than the arena (64 MiB by default): pieces of 4 MB, waiting for arena room.
bcast = (torch.full((24 << 20,), float(RANK)) if RANK == SIZE - 1 else torch.zeros(24 << 20))
started = time.monotonic()
dist.broadcast(bcast, SIZE - 1)
if not bool((bcast == float(SIZE - 1)).all()):
    FAILURES.append(f"rank {RANK}: 96 MB broadcast: wrong values")
print(f"rank {RANK}: 96 MB broadcast in pieces: {time.monotonic() - started:.2f} s", flush=True)
del bcast

# Compression: bf16 on the wire between nodes (exact here: small integers).
bf = nct.new_group(pg_options=nct.Options(compress="bf16", piece_mb=0.001))
assert dist.get_backend(bf) == "nodecomm"
t = data(RANK, 5000, torch.float32, 24)
dist.all_reduce(t, group=bf)
check("all_reduce bf16 wire, 1 KB pieces", t, reference("sum", 5000, torch.float32, 24))

# piece_mb=0: one operation per call, whatever the size.
whole = nct.new_group(pg_options=nct.Options(piece_mb=0))
t = data(RANK, 300001, torch.float32, 26)
dist.all_reduce(t, group=whole)
check("all_reduce in one piece", t, reference("sum", 300001, torch.float32, 26))

# One libnodecomm in the process: the extension uses the library ctypes loaded.
libs = {line.split()[-1] for line in open("/proc/self/maps") if "libnodecomm.so" in line}
if len(libs) != 1:
    FAILURES.append(f"rank {RANK}: libnodecomm mapped {len(libs)} times: {libs}")

# ---- errors ---------------------------------------------------------------------------------------
class OtherRank:  # what the creator gets when torch's rank is not nodecomm's
    store, timeout, group_id, global_ranks_in_group = None, TIMEOUT, "", []
    group_rank, group_size = (RANK + 1) % SIZE, SIZE


expect_error("torch rank != nodecomm rank", lambda: nct._create_backend(OtherRank()),
             f"torch rank {(RANK + 1) % SIZE}/{SIZE}", f"nodecomm world rank {RANK}/{SIZE}")
expect_error("band", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                             op=dist.ReduceOp.BAND), "band", "not supported")
expect_error("int avg", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32),
                                                op=dist.ReduceOp.AVG), "float")
expect_error("send", lambda: dist.send(torch.ones(1), (RANK + 1) % SIZE), "does not support")
expect_error("gpu-less check", lambda: dist.all_reduce(torch.ones(2).to_sparse()), "dense")
# A rank that skips a barrier: the others' wait times out with the operation named.
late = nct.new_group(timeout=3)
if RANK != 0:
    started = time.monotonic()
    expect_error("barrier timeout", lambda: dist.barrier(group=late), "timed out", "barrier")
    waited = time.monotonic() - started
    if not 2.5 < waited < 15:
        FAILURES.append(f"rank {RANK}: barrier timeout after {waited:.1f} s, expected ~3 s")
# monitored_barrier names the rank that did not come.
mb = nct.new_group(timeout=30)
if RANK != SIZE - 1:
    text = expect_error("monitored_barrier", lambda: mb.monitored_barrier(
        datetime.timedelta(seconds=2), wait_all_ranks=True),
        "monitored_barrier" if RANK == 0 else "rank 0")
    if RANK == 0 and f"rank {SIZE - 1} did not reach" not in text:
        FAILURES.append(f"rank 0: monitored_barrier does not name rank {SIZE - 1}: {text[:200]}")

# The world group still works after all that.
dist.barrier(group=GLOO)
t = data(RANK, 77, torch.float64, 25)
dist.all_reduce(t)
check("world after the error cases", t, reference("sum", 77, torch.float64, 25))

# Counts that differ between ranks: a clear error on every rank, no hang. Last: the job is
# erroneous from here on (the daemons fail its later operations too, as MPI would).
broken = nct.new_group(timeout=20)
started = time.monotonic()
text = expect_error("mismatched counts", lambda: dist.all_reduce(
    torch.ones(10 + RANK), group=broken), "rank")
if "mismatch" not in text.lower():
    FAILURES.append(f"rank {RANK}: mismatched counts: not reported as a mismatch: {text[:300]}")
print(f"rank {RANK}: mismatch reported in {time.monotonic() - started:.2f} s: "
      f"{text.splitlines()[0][:160] if text else '-'}", flush=True)

dist.barrier(group=GLOO)  # rank 0 holds the TCP store: nobody leaves before everyone is done
for line in FAILURES[:40]:
    print("FAIL:", line, flush=True)
print(f"rank {RANK}: {CHECKS[0]} checks, {len(FAILURES)} failures", flush=True)
nodecomm.finalize()
os._exit(1 if FAILURES else 0)
