"""mlsl_py_check: the MLSL layer through the Python module `mlsl` (docs/TESTING.md).

Run under nodecomm-launch. Checks, each value against a reference computed here with numpy from
the inputs' formulas and the documented group layout (docs/MLSL.md, "Process groups": model
group = M consecutive ranks, data group = D ranks M apart):

* the module: version, init/finalize reference counting and close(), MLSL_ALLOW_REINIT=1's
  import-time init (with --import-init), Error on argument errors, quantization parameters;
* every Distribution collective on every group of a (P/2)x2 distribution (Px1 for odd P), FLOAT
  and DOUBLE, counts 1 and 4099, out of place and in place (MLSL's meanings), on numpy views of
  Alloc'ed memory and on numpy-owned arrays, completed by wait or a test loop; BYTE sums wrap
  modulo 256; a distribution from colors;
* a model chain CC -> CC for model parts 1, 2 and 4 (where the world allows), distributed update
  off and on, library and numpy-owned buffers: activations both ways, reduced gradients and the
  parameters after the increment, packed and unpacked through the block info only.

Prints "mlsl_py_check: rank R ok (N checks)" and exits 0, or every failure and exits 1.
"""

import ctypes
import os
import sys

if "--import-init" in sys.argv:
    os.environ["MLSL_ALLOW_REINIT"] = "1"

import numpy as np  # noqa: E402

import mlsl  # noqa: E402
from mlsl import DataType, GroupType, OperationType, PhaseType, ReductionType  # noqa: E402

NP_TYPES = {DataType.FLOAT: np.float32, DataType.DOUBLE: np.float64, DataType.BYTE: np.uint8}
C_TYPES = {DataType.FLOAT: ctypes.c_float, DataType.DOUBLE: ctypes.c_double,
           DataType.BYTE: ctypes.c_ubyte}
DT_NAMES = {DataType.FLOAT: "float", DataType.DOUBLE: "double", DataType.BYTE: "byte"}
GT_NAMES = {GroupType.DATA: "data", GroupType.MODEL: "model", GroupType.GLOBAL: "global"}
RT_NAMES = {ReductionType.SUM: "sum", ReductionType.MIN: "min", ReductionType.MAX: "max"}


class Checks:
    def __init__(self):
        self.count = 0
        self.failures = 0
        self.rank = -1

    def fail(self, what):
        self.failures += 1
        print(f"mlsl_py_check: rank {self.rank}: FAIL: {what}", file=sys.stderr, flush=True)

    def true(self, cond, what):
        self.count += 1
        if not cond:
            self.fail(what)
        return bool(cond)

    def eq(self, got, want, what):
        return self.true(got == want, f"{what}: got {got!r}, expected {want!r}")

    def array(self, got, ref, what):
        """Every element of got against ref; reports the first mismatch."""
        self.count += 1
        got = np.asarray(got).reshape(-1)
        ref = np.asarray(ref).reshape(-1)
        if got.shape != ref.shape:
            self.fail(f"{what}: {got.size} elements, expected {ref.size}")
            return False
        bad = np.nonzero(got.astype(np.float64) != ref.astype(np.float64))[0]
        if bad.size:
            i = int(bad[0])
            self.fail(f"{what}: element {i} of {ref.size}: got {got[i]}, expected {ref[i]} "
                      f"({bad.size} differ)")
            return False
        return True

    def raises(self, fn, what):
        self.count += 1
        try:
            fn()
        except mlsl.Error as e:
            if not isinstance(e, RuntimeError):
                self.fail(f"{what}: mlsl.Error is not a RuntimeError")
            return
        except Exception as e:  # noqa: BLE001 - any other type is the failure being reported
            self.fail(f"{what}: raised {type(e).__name__} ({e}), expected mlsl.Error")
            return
        self.fail(f"{what}: did not raise mlsl.Error")


ck = Checks()


class Memory:
    """Buffers either in library memory (MLSL.alloc, seen through numpy views) or numpy-owned."""

    def __init__(self, env):
        self.env = env
        self.lib_ptrs = []

    def array(self, n, dt, lib):
        n = max(int(n), 1)
        if not lib:
            return np.empty(n, dtype=NP_TYPES[dt])
        ptr = self.env.alloc(n * np.dtype(NP_TYPES[dt]).itemsize, 64)
        ck.true(ptr.value is not None and ptr.value % 64 == 0, f"alloc {n} x {DT_NAMES[dt]}")
        self.lib_ptrs.append(ptr)
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(C_TYPES[dt])), shape=(n,))

    def free_all(self):
        for ptr in self.lib_ptrs:
            self.env.free(ptr)
        self.lib_ptrs = []


def view(ptr, n, dt):
    """A numpy view of n elements at a c_void_p the library returned."""
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(C_TYPES[dt])), shape=(n,))


# ---- the group layout (docs/MLSL.md "Process groups"), computed independently ----

def grid_group(g, p, d, m, gt):
    """(members by group index, this process's index) of CreateDistribution(d, m) on p."""
    l = g % (d * m)
    base = g - l
    if gt == GroupType.GLOBAL:
        return list(range(p)), g
    if gt == GroupType.MODEL:
        return [base + (l // m) * m + j for j in range(m)], l % m
    return [base + l % m + i * m for i in range(d)], l // m


# ---- inputs: small integers from (global rank, element) ----

def in_val(g, i):
    return (g * 37 + np.asarray(i, dtype=np.int64) * 11) % 101


def a2a_val(src, dst_idx, i):
    return (src * 29 + dst_idx * 7 + np.asarray(i, dtype=np.int64) * 3) % 113


def reduce_ref(rt, members, i):
    vals = np.stack([in_val(g, i) for g in members])
    return {ReductionType.SUM: vals.sum(0), ReductionType.MIN: vals.min(0),
            ReductionType.MAX: vals.max(0)}[rt]


class Coll:
    def __init__(self, env, mem, dist, gt, members, k, dt, count, in_place, lib, use_test):
        self.env, self.mem, self.dist, self.gt = env, mem, dist, gt
        self.members, self.k, self.n = members, k, len(members)
        self.dt, self.count, self.in_place, self.lib, self.use_test = (dt, count, in_place, lib,
                                                                        use_test)
        self.rank = members[k]
        self.what = ""

    def name(self, what):
        self.what = (f"{what} {GT_NAMES[self.gt]} group, {DT_NAMES[self.dt]} x {self.count}, "
                     f"{'in place' if self.in_place else 'out of place'}, "
                     f"{'library' if self.lib else 'numpy'} buffers, "
                     f"{'test loop' if self.use_test else 'wait'}")

    def buf(self, n):
        return self.mem.array(n, self.dt, self.lib)

    def complete(self, req):
        if not self.use_test:
            self.env.wait(req)
            return
        while not self.env.test(req):
            pass
        if not getattr(Coll, "stale_checked", False):
            # The completing test consumed the request: its handle is stale now.
            Coll.stale_checked = True
            ck.raises(lambda: self.env.wait(req), "wait on a request a test completed")


def check_bcast(c):
    c.name("bcast")
    n = c.count
    root = (n + c.in_place) % c.n
    buf = c.buf(n)
    buf[:] = in_val(c.rank, np.arange(n))
    c.complete(c.dist.bcast(buf, n, c.dt, root, c.gt))
    ck.array(buf, in_val(c.members[root], np.arange(n)), c.what)


def check_reduce(c, rt):
    n = c.count
    root = (n + c.in_place + 1) % c.n
    c.name(f"reduce {RT_NAMES[rt]} root {root}")
    send = c.buf(n)
    send[:] = in_val(c.rank, np.arange(n))
    recv = send if c.in_place else c.buf(n)
    c.complete(c.dist.reduce(send, recv, n, c.dt, rt, root, c.gt))
    if c.k == root:
        ck.array(recv, reduce_ref(rt, c.members, np.arange(n)), c.what)


def check_all_reduce(c, rt):
    n = c.count
    c.name(f"all_reduce {RT_NAMES[rt]}")
    send = c.buf(n)
    send[:] = in_val(c.rank, np.arange(n))
    recv = send if c.in_place else c.buf(n)
    c.complete(c.dist.all_reduce(send, recv, n, c.dt, rt, c.gt))
    ck.array(recv, reduce_ref(rt, c.members, np.arange(n)), c.what)
    if not c.in_place:
        ck.array(send, in_val(c.rank, np.arange(n)), c.what + " (send untouched)")


def check_all_to_all(c):
    c.name("all_to_all")
    n, gn = c.count, c.n
    send = c.buf(n * gn)
    recv = send if c.in_place else c.buf(n * gn)
    i = np.arange(n)
    for j in range(gn):
        send[j * n:(j + 1) * n] = a2a_val(c.rank, j, i)
    ref = np.concatenate([a2a_val(c.members[j], c.k, i) for j in range(gn)])
    c.complete(c.dist.all_to_all(send, n, recv, c.dt, c.gt))
    ck.array(recv[:n * gn], ref, c.what)


def check_all_to_allv(c):
    """Counts that differ per pair (symmetric, for MLSL's in-place form) and gaps that must stay
    untouched."""
    c.name("all_to_allv")
    gn, k, gap = c.n, c.k, 99
    scount = [c.count + (k + j) % 3 for j in range(gn)]
    rcount = [c.count + (j + k) % 3 for j in range(gn)]
    soff = list(np.cumsum([0] + [x + 1 for x in scount])[:gn])
    roff = list(np.cumsum([0] + [x + 2 for x in rcount])[:gn])
    stotal, rtotal = soff[-1] + scount[-1] + 1, roff[-1] + rcount[-1] + 2
    if c.in_place:
        scount, soff, stotal = rcount, roff, rtotal  # the data to send lies where replies land
    send = c.buf(stotal)
    send[:] = gap
    recv = send if c.in_place else c.buf(rtotal)
    if not c.in_place:
        recv[:] = gap
    ref = np.full(rtotal, gap, dtype=np.float64)
    for j in range(gn):
        send[soff[j]:soff[j] + scount[j]] = a2a_val(c.rank, j, np.arange(scount[j]))
        ref[roff[j]:roff[j] + rcount[j]] = a2a_val(c.members[j], k, np.arange(rcount[j]))
    # Counts as a numpy array for one side and a list for the other: both are accepted.
    c.complete(c.dist.all_to_allv(send, np.array(scount, dtype=np.uint64), soff, recv, rcount,
                                  roff, c.dt, c.gt))
    ck.array(recv[:rtotal], ref, c.what)


def check_gather(c):
    n, gn, k = c.count, c.n, c.k
    root = (n + 2 + c.in_place) % gn
    c.name(f"gather root {root}")
    mine, allb = c.buf(n), c.buf(n * gn)
    allb[:] = 77
    mine[:n] = in_val(c.rank, np.arange(n))
    send, recv = mine, allb
    if c.in_place:
        if k == root:
            allb[root * n:(root + 1) * n] = mine[:n]
            send = allb[root * n:]  # the root's block already in place
        else:
            recv = None
    c.complete(c.dist.gather(send, n, recv, c.dt, root, c.gt))
    if k == root:
        ref = np.concatenate([in_val(g, np.arange(n)) for g in c.members])
        ck.array(allb[:n * gn], ref, c.what)


def check_all_gather(c):
    c.name("all_gather")
    n, gn, k = c.count, c.n, c.k
    allb = c.buf(n * gn)
    allb[:] = 77
    if c.in_place:
        allb[k * n:(k + 1) * n] = in_val(c.rank, np.arange(n))
        send = allb
    else:
        send = c.buf(n)
        send[:n] = in_val(c.rank, np.arange(n))
    c.complete(c.dist.all_gather(send, n, allb, c.dt, c.gt))
    ref = np.concatenate([in_val(g, np.arange(n)) for g in c.members])
    ck.array(allb[:n * gn], ref, c.what)


def check_all_gatherv(c):
    c.name("all_gatherv")
    gn, k = c.n, c.k
    counts = [c.count + j for j in range(gn)]
    displ = [sum(counts[:j]) for j in range(gn)]
    total = sum(counts)
    allb = c.buf(total)
    allb[:] = 77
    if c.in_place:
        allb[displ[k]:displ[k] + counts[k]] = in_val(c.rank, np.arange(counts[k]))
        send = allb
    else:
        send = c.buf(counts[k])
        send[:counts[k]] = in_val(c.rank, np.arange(counts[k]))
    c.complete(c.dist.all_gatherv(send, counts[k], allb, counts, c.dt, c.gt))
    ref = np.concatenate([in_val(c.members[j], np.arange(counts[j])) for j in range(gn)])
    ck.array(allb[:total], ref, c.what)


def check_scatter(c):
    n, gn, k = c.count, c.n, c.k
    root = (n + 3 + c.in_place) % gn
    c.name(f"scatter root {root}")
    allb, mine = c.buf(n * gn), c.buf(n)
    allb[:n * gn] = in_val(c.rank, np.arange(n * gn))
    mine[:] = 77
    send, recv, result = allb, mine, mine
    if c.in_place:
        if k == root:
            recv = result = allb[root * n:(root + 1) * n]
        else:
            send = None
    c.complete(c.dist.scatter(send, recv, n, c.dt, root, c.gt))
    ck.array(result[:n], in_val(c.members[root], k * n + np.arange(n)), c.what)


def check_reduce_scatter(c, rt):
    n, gn, k = c.count, c.n, c.k
    c.name(f"reduce_scatter {RT_NAMES[rt]}")
    send = c.buf(n * gn)
    send[:n * gn] = in_val(c.rank, np.arange(n * gn))
    recv = send if c.in_place else c.buf(n)
    c.complete(c.dist.reduce_scatter(send, recv, n, c.dt, rt, c.gt))
    # In place, MLSL leaves the result at the start of the buffer.
    ck.array(recv[:n], reduce_ref(rt, c.members, k * n + np.arange(n)), c.what)


def check_collectives(env, mem, dist, rank, world, d, m):
    for t in (GroupType.DATA, GroupType.MODEL, GroupType.GLOBAL):
        members, k = grid_group(rank, world, d, m, t)
        ck.eq(dist.get_process_idx(t), k, f"{d}x{m} {GT_NAMES[t]} index")
        ck.eq(dist.get_process_count(t), len(members), f"{d}x{m} {GT_NAMES[t]} size")
        for di, dt in enumerate((DataType.FLOAT, DataType.DOUBLE)):
            for ci, count in enumerate((1, 4099)):
                for ip in (0, 1):
                    # Each collective sees both buffer kinds and both ways of completing.
                    c = Coll(env, mem, dist, t, members, k, dt, count, ip, (ip + ci + t) % 2,
                             (ip + di + ci) % 2)
                    check_bcast(c)
                    check_reduce(c, ReductionType.SUM)
                    check_reduce(c, ReductionType.MAX)
                    for rt in (ReductionType.SUM, ReductionType.MIN, ReductionType.MAX):
                        check_all_reduce(c, rt)
                    check_all_to_all(c)
                    check_all_to_allv(c)
                    check_gather(c)
                    check_all_gather(c)
                    check_all_gatherv(c)
                    check_scatter(c)
                    check_reduce_scatter(c, ReductionType.SUM)
                    check_reduce_scatter(c, ReductionType.MIN)
                    mem.free_all()
        dist.barrier(t)

    # BYTE is unsigned: sums wrap modulo 256, and 200 > 100 under MAX.
    i = np.arange(5)
    for rt in (ReductionType.SUM, ReductionType.MAX):
        buf = ((200 + rank * 13 + i) % 256).astype(np.uint8)
        vals = np.stack([(200 + g * 13 + i) % 256 for g in range(world)])
        ref = vals.sum(0) % 256 if rt == ReductionType.SUM else vals.max(0)
        env.wait(dist.all_reduce(buf, buf, 5, DataType.BYTE, rt, GroupType.GLOBAL))
        ck.array(buf, ref, f"byte all_reduce {RT_NAMES[rt]}")


def check_colors(env, rank, world):
    """create_distribution_with_colors (extension): a grid transposed from
    create_distribution's; group index = order of the global ranks."""
    even = world % 2 == 0

    def colors(g):
        return (g // 2, g % 2) if even else (0, g)  # (data, model)

    dc, mc = colors(rank)
    dist = env.create_distribution_with_colors(dc, mc)
    for t, pos in ((GroupType.DATA, 0), (GroupType.MODEL, 1)):
        members = [g for g in range(world) if colors(g)[pos] == colors(rank)[pos]]
        ck.eq(dist.get_process_idx(t), members.index(rank), f"colors {GT_NAMES[t]} index")
        ck.eq(dist.get_process_count(t), len(members), f"colors {GT_NAMES[t]} size")
        value = np.array([rank], dtype=np.float64)
        env.wait(dist.all_reduce(value, value, 1, DataType.DOUBLE, ReductionType.SUM, t))
        ck.eq(value[0], sum(members), f"colors {GT_NAMES[t]} members")
    env.delete_distribution(dist)


# ---- the model chain: op0 (CC) -> op1 (CC), docs/MLSL.md "Activation exchanges" ----

FIN0, F0, F1, F2, FM = 4, 8, 8, 4, 3
LAYERS = ((10, 3, DataType.FLOAT), (7, 2, DataType.DOUBLE))  # kernels, kernel size, dtype
ITERS = 2


def fwd_val(mb, fm, s, it, m):
    """What producer model member m writes; the consumer must see the sum over the group."""
    return (((mb * F0 + fm) * FM + s + it * 5) % 53 + 1) * (m + 1)


def bwd_val(mb, fm, s, it):
    return ((mb * F1 + fm) * FM + s + it * 7) % 59 + 2


def grad_val(e, d):
    return e % 23 + 1 + d * 2


def param_val(e, it):
    return (e * 5 + it * 3) % 31 + 1


def tile_coords(mb, fms, off_mb, off_fm):
    """Global (mb, fm, s) index grids of a [mb][fm][space] tile."""
    return np.meshgrid(off_mb + np.arange(mb), off_fm + np.arange(fms), np.arange(FM),
                       indexing="ij")


def blocks(act, pack):
    n = act.get_pack_block_count() if pack else act.get_unpack_block_count()
    out = []
    for b in range(n):
        info = act.get_pack_block(b) if pack else act.get_unpack_block(b)
        out.append((info.get_mb_offset(), info.get_mb_count(), info.get_fm_offset(),
                    info.get_fm_count(), info.get_fm_size(), info.get_buf_offset(),
                    info.get_data_type()))
    return out


def move(act, pack, tile, buf_ptr, what):
    """Tile <-> comm buffer through the block list, the only geometry a program may use."""
    bl = blocks(act, pack)
    if not bl:
        return
    size = max(off + mbc * fmc * fms for (_, mbc, _, fmc, fms, off, _) in bl)
    buf = view(buf_ptr, size, DataType.FLOAT)
    for (mbo, mbc, fmo, fmc, fms, off, dt) in bl:
        ck.true(dt == DataType.FLOAT and fms == FM and mbo + mbc <= tile.shape[0]
                and fmo + fmc <= tile.shape[1],
                f"{what}: block {(mbo, mbc, fmo, fmc, fms, off, dt)} outside tile {tile.shape}")
        area = buf[off:off + mbc * fmc * fms]
        if pack:
            area[:] = tile[mbo:mbo + mbc, fmo:fmo + fmc, :].reshape(-1)
        else:
            tile[mbo:mbo + mbc, fmo:fmo + fmc, :] = area.reshape(mbc, fmc, fms)


def run_chain(env, world, rank, d, m, du, lib):
    name = f"chain {d}x{m} du {int(du)} {'library' if lib else 'numpy'} buffers"
    use_test = lib == du
    dist = env.create_distribution(d, m)
    di = grid_group(rank, world, d, m, GroupType.DATA)[1]
    mi = grid_group(rank, world, d, m, GroupType.MODEL)[1]
    gmb = 2 * d
    mb = gmb // d
    mb_off = mb * di
    mem = Memory(env)

    session = env.create_session(PhaseType.TRAIN)
    session.set_global_minibatch_size(gmb)
    ck.eq(session.get_global_minibatch_size(), gmb, f"{name}: session minibatch")
    ck.eq(session.get_phase_type(), PhaseType.TRAIN, f"{name}: session phase")
    ops = []
    for i, (kernels, ks, pdt) in enumerate(LAYERS):
        reg = session.create_operation_reg_info(OperationType.CC)
        reg.set_name(f"py_cc{i}" if i == 0 else f"py_cc{i}".encode())
        ck.eq(reg.add_input(FIN0 if i == 0 else F1, FM, DataType.FLOAT), 0, f"{name}: input idx")
        ck.eq(reg.add_output(F0 if i == 0 else F2, FM, DataType.FLOAT), 0, f"{name}: output idx")
        ck.eq(reg.add_parameter_set(kernels, ks, pdt, du, compress_type=mlsl.CompressionType.NONE),
              0, f"{name}: parameter set idx")
        reg.validate(dist if i == 0 else None)
        idx = (session.add_operation_with_distribution(reg, dist) if i == 0
               else session.add_operation(reg))
        ck.eq(idx, i, f"{name}: operation index")
        session.delete_operation_reg_info(reg)
        ops.append(session.get_operation(i))
    ops[1].set_distribution(dist)
    ck.eq(session.get_operation_count(), 2, f"{name}: operation count")
    if lib:
        ops[0].set_next(ops[1], 0, 0)
    else:
        ops[1].set_prev(ops[0], 0, 0)
    for i, op in enumerate(ops):
        ck.true(op.get_distribution() == dist, f"{name}: op{i} distribution")
        ck.true(op.get_session() == session, f"{name}: op{i} session")
        ck.eq(op.get_op_type(), OperationType.CC, f"{name}: op{i} type")
        ck.eq(op.get_name(), f"py_cc{i}".encode(), f"{name}: op{i} name")
        ck.eq(op.get_global_minibatch_size(), gmb, f"{name}: op{i} global minibatch")
        ck.eq(op.get_local_minibatch_size(), mb, f"{name}: op{i} local minibatch")
        ck.eq(op.get_global_minibatch_offset(), mb_off, f"{name}: op{i} minibatch offset")
        ck.eq((op.get_input_count(), op.get_output_count(), op.has_parameter_sets(),
               op.get_parameter_set_count()), (1, 1, True, 1), f"{name}: op{i} counts")
    session.commit()

    acts = {"in0": ops[0].get_input(0), "out0": ops[0].get_output(0),
            "in1": ops[1].get_input(0), "out1": ops[1].get_output(0)}
    # A CC output holds every feature map (partial sums); an input holds its model slice.
    for key, gfm, lfm, off in (("in0", FIN0, FIN0 // m, FIN0 // m * mi), ("out0", F0, F0, 0),
                               ("in1", F1, F1 // m, F1 // m * mi), ("out1", F2, F2, 0)):
        a = acts[key]
        ck.eq((a.get_global_fm_count(), a.get_local_fm_count(), a.get_global_fm_offset(),
               a.get_fm_size(), a.get_data_type()), (gfm, lfm, off, FM, DataType.FLOAT),
              f"{name}: {key} geometry")

    layers = []
    for i, (kernels, ks, pdt) in enumerate(LAYERS):
        ps = ops[i].get_parameter_set(0)
        local = kernels // m
        gofs = local * mi
        if du:
            owned = -(-local // d)
            local, owned_off = owned * d, owned * di
        else:
            owned, owned_off = local, 0
        ck.eq((ps.get_global_kernel_count(), ps.get_global_kernel_offset(),
               ps.get_local_kernel_count(), ps.get_owned_kernel_count(),
               ps.get_owned_kernel_offset(), ps.get_kernel_size(), ps.get_data_type(),
               ps.is_distributed_update()),
              (kernels, gofs, local, owned, owned_off, ks, pdt, bool(du)),
              f"{name}: op{i} parameter set")
        layers.append(dict(ps=ps, ks=ks, pdt=pdt, local=local, owned=owned, owned_off=owned_off,
                           gofs=gofs, grad=mem.array(local * ks, pdt, lib),
                           params=mem.array(local * ks, pdt, lib)))

    stats = session.get_stats()
    enabled = stats.is_enabled()
    if use_test:
        # Never started by the program: not complete and no buffer; complete when there is no
        # exchange. With statistics on, Commit's isolation runs started and waited it already.
        ret, done = layers[0]["ps"].test_gradient_comm()
        ck.true(ret is None and (enabled or done == (d == 1)),
                f"{name}: test_gradient_comm before any start: {ret}, {done}")
    stats.start()
    if enabled:
        ck.true(stats.is_started(), f"{name}: statistics started")

    def send_buffer(act):
        size = act.get_comm_buf_size()
        if size == 0:
            return None
        if lib:
            ptr = act.get_comm_buf()
            ck.true(ptr.value is not None, f"{name}: get_comm_buf NULL with {size} bytes")
            return ptr
        return np.empty(size, dtype=np.uint8)

    def ptr_of(buf):
        return buf if isinstance(buf, ctypes.c_void_p) else ctypes.c_void_p(buf.ctypes.data)

    l_in1 = F1 // m
    for it in range(ITERS):
        # Forward.
        ck.true(acts["in0"].wait_comm().value is None, f"{name}: op0 input wait_comm")
        ck.eq(acts["in0"].get_unpack_block_count(), 0, f"{name}: op0 input unpack blocks")
        for i, ly in enumerate(layers):
            ret = ly["ps"].wait_increment_comm()
            exchanged = du and d > 1 and it > 0
            what = f"{name} it {it}: op{i} wait_increment_comm"
            if exchanged:
                if ck.true(ret is not None and ret.value == ly["params"].ctypes.data, what):
                    e = np.arange(ly["local"] * ly["ks"])
                    ck.array(ly["params"][:e.size], param_val(ly["gofs"] * ly["ks"] + e, it - 1),
                             what)
            else:
                ck.true(ret is None, f"{what}: got {ret}, expected None")
        g_mb, g_fm, g_s = tile_coords(mb, F0, mb_off, 0)
        out0 = fwd_val(g_mb, g_fm, g_s, it, mi).astype(np.float32)
        buf = send_buffer(acts["out0"])
        if buf is not None:
            move(acts["out0"], True, out0, ptr_of(buf), f"{name} forward pack")
            acts["out0"].start_comm(buf)
        in1 = np.full((mb, l_in1, FM), -1, dtype=np.float32)
        ret = acts["in1"].wait_comm()
        if ret.value is not None:
            move(acts["in1"], False, in1, ret, f"{name} forward unpack")
        else:
            ck.eq(m, 1, f"{name}: op1 input wait_comm returned NULL")
            in1[:] = out0  # no exchange: the program shares the tile
        g_mb, g_fm, g_s = tile_coords(mb, l_in1, mb_off, l_in1 * mi)
        ref = sum(fwd_val(g_mb, g_fm, g_s, it, mm) for mm in range(m))
        ck.array(in1, ref, f"{name} it {it}: op1 input after forward")

        # Backward.
        ck.true(acts["out1"].wait_comm().value is None, f"{name}: op1 output wait_comm")
        in1[:] = bwd_val(g_mb, g_fm, g_s, it)
        buf1 = send_buffer(acts["in1"])
        if buf1 is not None:
            move(acts["in1"], True, in1, ptr_of(buf1), f"{name} backward pack")
            acts["in1"].start_comm(buf1)
        for i in (1, 0):
            ly = layers[i]
            e = np.arange(ly["local"] * ly["ks"])
            ly["grad"][:e.size] = grad_val(ly["gofs"] * ly["ks"] + e, di)
            ly["ps"].start_gradient_comm(ly["grad"])
            if i == 1:
                out0g = np.full((mb, F0, FM), -1, dtype=np.float32)
                ret = acts["out0"].wait_comm()
                if ret.value is not None:
                    move(acts["out0"], False, out0g, ret, f"{name} backward unpack")
                else:
                    out0g[:] = in1
                g_mb0, g_fm0, g_s0 = tile_coords(mb, F0, mb_off, 0)
                ck.array(out0g, bwd_val(g_mb0, g_fm0, g_s0, it),
                         f"{name} it {it}: op0 output gradient after backward")

        # Update.
        for i, ly in enumerate(layers):
            what = f"{name} it {it}: op{i} gradient"
            if use_test:
                ret, done = None, False
                while not done:
                    ret, done = ly["ps"].test_gradient_comm()
                again = ly["ps"].wait_gradient_comm()
                ck.true((again.value if again else None) == (ret.value if ret else None),
                        f"{what}: wait after a completing test returned {again}, not {ret}")
            else:
                ret = ly["ps"].wait_gradient_comm()
            start = ly["owned_off"] * ly["ks"] if du else 0
            n = (ly["owned"] if du else ly["local"]) * ly["ks"]
            if d == 1:
                ck.true(ret is None, f"{what}: got {ret}, expected None (data group of one)")
            elif not du:
                ck.true(ret is not None and ret.value == ly["grad"].ctypes.data,
                        f"{what}: got {ret}, expected the buffer passed")
            else:
                ck.true(ret is not None and ret.value != ly["grad"].ctypes.data,
                        f"{what}: got {ret}, expected the library's owned-part buffer")
            if ret is not None:
                e = ly["gofs"] * ly["ks"] + start + np.arange(n)
                ck.array(view(ret, n, ly["pdt"]), sum(grad_val(e, dd) for dd in range(d)), what)
            ck.true(ly["ps"].wait_gradient_comm() is None, f"{what}: second wait not None")
            p = ly["params"]
            p[:] = -5
            own = np.arange(ly["owned_off"] * ly["ks"], (ly["owned_off"] + ly["owned"]) * ly["ks"])
            p[own] = param_val(ly["gofs"] * ly["ks"] + own, it)
            ly["ps"].start_increment_comm(p)

    for i, ly in enumerate(layers):
        ret = ly["ps"].wait_increment_comm()
        what = f"{name}: op{i} final wait_increment_comm"
        if du and d > 1:
            if ck.true(ret is not None and ret.value == ly["params"].ctypes.data, what):
                e = np.arange(ly["local"] * ly["ks"])
                ck.array(ly["params"][:e.size], param_val(ly["gofs"] * ly["ks"] + e, ITERS - 1),
                         what)
        else:
            ck.true(ret is None, f"{what}: got {ret}, expected None")
        ck.true(ly["ps"].wait_increment_comm() is None, f"{what} (twice)")

    stats.stop()
    ck.true(not stats.is_started(), f"{name}: statistics stopped")
    for op in range(2):
        for value in (stats.get_isolation_comm_cycles(op), stats.get_comm_size(op),
                      stats.get_comm_cycles(op), stats.get_compute_cycles(op)):
            ck.true(value >= 0 and (enabled or value == 0), f"{name}: statistics op{op} {value}")
    total = stats.get_total_comm_size()
    if enabled and (m > 1 or d > 1):
        ck.true(total > 0, f"{name}: statistics total comm size {total} after exchanges")
    for value in (stats.get_total_isolation_comm_cycles(), stats.get_total_comm_cycles(),
                  stats.get_total_compute_cycles()):
        ck.true(value >= 0, f"{name}: statistics totals")
    stats.dump()
    stats.reset()

    session.remove_operations()
    ck.eq(session.get_operation_count(), 0, f"{name}: operations after remove_operations")
    env.delete_session(session)
    mem.free_all()
    env.delete_distribution(dist)


def check_refusals(env, dist):
    f = np.ones(1, dtype=np.float32)
    ck.raises(lambda: env.wait(0x1237), "wait on a made-up request")
    ck.raises(lambda: env.test(0), "test on request 0")
    ck.raises(lambda: mlsl.mlsl._Session(0x1000).commit(), "commit on a made-up session")
    ck.raises(lambda: mlsl.mlsl._Activation(0x40).get_comm_buf(), "made-up activation")
    ck.raises(lambda: dist.get_process_idx(3), "group type out of range")
    ck.raises(lambda: dist.all_reduce(f, f, 1, 7, ReductionType.SUM, GroupType.GLOBAL),
              "data type out of range")
    ck.raises(lambda: dist.all_reduce(f, f, 1, DataType.FLOAT, 5, GroupType.GLOBAL),
              "reduction out of range")
    ck.raises(lambda: env.create_session(9), "phase out of range")
    ck.eq(f[0], 1, "refused all_reduce left its buffer alone")


def main():
    import_init = "--import-init" in sys.argv
    env = mlsl.MLSL()
    ck.eq(env.get_version(), 65536, "version")
    # init/finalize count: only the first init and the last finalize reach the library.
    if import_init:
        ck.true(env.is_initialized(), "MLSL_ALLOW_REINIT=1: initialized at import")
    else:
        ck.true(not env.is_initialized(), "initialized before init()")
        env.init()
    ck.true(env.is_initialized(), "initialized after init()")
    env.init()
    ck.raises(mlsl.close, "close() with two init() outstanding")
    env.finalize()
    ck.true(env.is_initialized(), "still initialized after an inner finalize()")
    ck.rank = rank = env.get_process_idx()
    world = env.get_process_count()

    ptr = env.alloc(70000, 4096)
    ck.true(ptr.value is not None and ptr.value % 4096 == 0, f"alloc(70000, 4096) = {ptr}")
    view(ptr, 70000, DataType.BYTE)[:] = 3
    env.free(ptr)

    ck.true(env.get_quantization_params() is None, "quantization params before set")
    qp = mlsl.QuantParams(b"libquant_stub.so", b"q", b"dq", b"rs", 268, 256)
    env.set_quantization_params(qp)
    got = env.get_quantization_params()
    ck.true(got is not None and (got.lib_path, got.quant_buffer_func_name,
                                 got.dequant_buffer_func_name, got.reduce_sum_func_name,
                                 got.block_size, got.elem_in_block)
            == (b"libquant_stub.so", b"q", b"dq", b"rs", 268, 256),
            "quantization params round trip")

    m = 2 if world % 2 == 0 else 1
    d = world // m
    dist = env.create_distribution(d, m)
    mem = Memory(env)
    check_refusals(env, dist)
    check_collectives(env, mem, dist, rank, world, d, m)
    mem.free_all()
    check_colors(env, rank, world)
    env.delete_distribution(dist)

    for mparts in (1, 2, 4):
        if world % mparts:
            continue
        for du in (False, True):
            for lib in (True, False):
                run_chain(env, world, rank, world // mparts, mparts, du, lib)

    mlsl.close()
    ck.true(not env.is_initialized(), "initialized after close()")
    ck.raises(env.finalize, "finalize() with no init() outstanding")

    if ck.failures:
        print(f"mlsl_py_check: rank {rank} FAILED ({ck.failures} of {ck.count} checks)",
              file=sys.stderr)
        return 1
    print(f"mlsl_py_check: rank {rank} ok ({ck.count} checks)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
