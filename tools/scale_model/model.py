"""The cost model of nodecomm's allreduce: alpha-beta terms for each path an operation takes.

An allreduce of S bytes on N nodes with R ranks per node (the daemon's view, docs/SCALING.md):

  T = o(R) + [N > 1] * (round(N) + network(S, N)) overlapped with local(S, R)

  o(R)          the hand-offs client -> daemon -> client: o1 + o2 * (R - 1)
  local(S, R)   the daemon's delivery of the result to its R ranks and its reduction of
                the R - 1 buffers beyond the first: S * (l1 * R + l2 * (R - 1)) seconds,
                plus (S - cache) * (l3 * R + l4 * (R - 1)) for what does not fit the cache
                (cache_bytes)
  round(N)      the negotiated scheduler's agreement: one all-to-all exchange of small
                records up to gather_nodes nodes (N - 1 messages, alpha_r each, overlapped:
                alpha_r + (N - 2) * alpha_p), a recursive-doubling combine beyond
                (ceil(log2 N) steps of alpha_r)
  network(S, N) S <= eager (1 KiB): the data rides in the round; each round record a daemon
                takes in carries it (N - 1 of them up to gather_nodes, ceil(log2 N) beyond),
                at eager_byte seconds per byte of it (its handling on the hosts: the token
                bucket passes records this small at once)
                N > 2 and S <= switch(N) (rd_switch_bytes): recursive doubling, steps(N) *
                alpha_m + (log2 p + [N != p]) * S * beta (the busiest node's link: its log2 p
                exchanges and, beyond a power of two p, the result it sends back), steps =
                log2 p + 2 [N != p]; between folding the N - p nodes beyond p in and out, only
                p daemons exchange, so those log2 p steps wait for a time slice as p nodes'
                would (below)
                else the ring: 2 (N - 1) alpha_m + 2 (N - 1) / N * S * beta (its slices
                pipeline, so the first slice's way around is hidden); in a training step
                (loaded) the ring at every size on up to loaded_ring_nodes, as the daemon

  beta = 1 / (eta * rate): the link's rate in bytes per second times what of it TCP and the
  shaping leave (eta); the local part overlaps the wire part range by range, so the larger of
  the two counts in full and the smaller by `overlap_rest` (0: fully hidden, 1: not at all).

  With wire compression the allreduce takes the ring, its wire carries the wire type's bytes,
  and the transfer goes no faster than the daemons' encoding and decoding (codec_time).

  A simulated link (tc's token bucket, nodecomm-launch --netsim) refills its bucket while an
  operation's fixed costs keep it idle, up to burst_bytes, and then sends that much at once:
  the wire part is shortened by min(burst_bytes * beta, the fixed costs). Real fabrics have no
  such bucket (burst_bytes 0).

On the development machine every simulated node's processes share 2 cores; the latency terms
(o, alpha_*) are scaled by 1 + contention * x ** contention_power, x = (N (1 + rank_weight R)
- cores) / cores where that is positive: each hand-off and message may wait for a time slice.
A rank counts rank_weight of a daemon (it is parked while the daemons exchange a round's
records and a step's messages), and the waits grow faster than the processes
(contention_power > 1): each of the N daemons' messages waits behind the others' (the
calibration in use, 2026-12-06 13:22: 0.89, 1.5 and 0.3). The ring's steps wait only where
their transfer does not cover the wait (step_latency). On a real node, with the daemon on
dedicated cores, the factor is 1.

The share of the link large transfers reach falls with the node count (more daemons' TCP
streams through the simulated switch, more ring steps to keep in step): eta(N) = eta -
eta_slope * (N - 2).
"""
import math
from dataclasses import asdict, dataclass, field, fields

KIB = 1024
MIB = 1024 * 1024


@dataclass
class Tuning:
    """The daemon's defaults (daemon/config/tuning.hpp) that shape the paths."""
    eager_bytes: int = 1024          # kMaxEagerBytes: allreduces carried in the round
    small_bytes: int = None          # AlgorithmTuning::small_bytes; None: auto, the model's
    latency_bytes: int = 16 * KIB    # AlgorithmTuning::latency_bytes (--latency-bytes)
    max_auto_switch: int = 256 * KIB  # kMaxAutoSwitchBytes: auto's switch at most this
    halving: bool = False            # what if: halving-doubling instead of the ring (not built)
    slice_bytes: int = 512 * KIB     # AlgorithmTuning::chunk_bytes: the ring's slices
    gather_nodes: int = 8            # kDefaultGatherNodes: all-to-all rounds up to this
    loaded_ring_nodes: int = 8       # kLoadedRingMaxNodes: the ring at every size on a loaded
                                     # link up to this (workload.py)
    target_us: int = 2000            # SchedulerTuning::target_delay_us: the window's link time
    hold_max_nodes: int = 128        # kHoldMaxNodes: a more urgent operation on the network
                                     # holds the less urgent units on up to this many nodes
                                     # (workload.py); 0: never, as --sched-hold-us 0
    hold_us: int = 10000             # SchedulerTuning::hold_us: a hold lasts at most this long
                                     # after the urgent operation became ready (workload.py)
    hold_stream_us: int = 2000       # kHoldStreamUs: an arrival more urgent than the one held
                                     # for suspends holding until this long passes without a
                                     # newer one (workload.py); 0: hold for every one


@dataclass
class Params:
    """Calibrated on this machine by `tools/scale-model calibrate`, or a fabric's (fabrics.py)."""
    o1: float = 20e-6          # s: one 8-byte allreduce on 1 node x 1 rank
    o2: float = 10e-6          # s per extra local rank
    l1: float = 0.2e-9         # s per byte per local rank: delivering the result to it
    l2: float = 0.2e-9         # s per byte per local rank beyond the first: reducing its buffer
    l3: float = 0.1e-9         # as l1, for the bytes beyond the cache
    l4: float = 0.1e-9         # as l2, for the bytes beyond the cache
    cache_bytes: int = 8 * MIB  # fixed, not fitted: about the machine's last-level cache
    burst_bytes: int = 256 * KIB  # fixed: --netsim's tbf burst (0 on a real fabric)
    alpha_r: float = 100e-6    # s: a scheduling round's first record exchange
    alpha_p: float = 10e-6     # s: each further peer in an all-to-all round
    alpha_m: float = 50e-6     # s: one message step of an algorithm between daemons
    eta: float = 0.95          # of the link rate, what the daemons' transfers reach (2 nodes)
    eta_slope: float = 0.005   # what eta loses per node beyond 2
    overlap_rest: float = 0.1  # share of the smaller of local / wire that is not hidden
    codec: float = 0.5e-9      # s per f32 byte and ring pass: bf16/f16 encoding and decoding
    codec_int8: float = 2e-9   # the same for int8 (block scales, rounding, error feedback)
    eager_byte: float = 0.0    # s per byte of eager data in each round record a daemon takes in
    contention: float = 0.0    # slope of the oversubscription factor on latencies
    contention_power: float = 1.0  # its growth with the processes beyond the cores
    rank_weight: float = 1.0   # what a rank counts in the processes, against a daemon's 1
    cores: int = 2             # the machine's cores (for the oversubscription factor)
    source: dict = field(default_factory=dict)  # how each was obtained

    def to_json(self):
        return asdict(self)

    @staticmethod
    def from_json(d):
        known = {f.name for f in fields(Params)}
        return Params(**{k: v for k, v in d.items() if k in known})


def pow2_floor(nodes):
    """The largest power of two not above `nodes`: the nodes recursive doubling pairs up."""
    return 1 << (nodes.bit_length() - 1)


def rd_folds(nodes):
    """Recursive doubling's steps folding the nodes beyond pow2_floor in and out: 0 or 2."""
    return 0 if nodes == pow2_floor(nodes) else 2


def rd_steps(nodes):
    return pow2_floor(nodes).bit_length() - 1 + rd_folds(nodes)


def rd_wire_steps(nodes):
    """The steps whose whole buffer crosses the busiest node's link: the log2 p exchanges and,
    with folds, the result sent back out (the fold in carries nothing from the busiest node)."""
    return rd_steps(nodes) - (1 if rd_folds(nodes) else 0)


def oversubscription(p: Params, nodes, ranks):
    procs = nodes * (1 + p.rank_weight * ranks)
    if p.contention == 0 or procs <= p.cores:
        return 1.0
    return 1.0 + p.contention * ((procs - p.cores) / p.cores) ** p.contention_power


def round_records(t: Tuning, nodes):
    """The round records a daemon takes in before it has every node's: one from each peer in
    an all-to-all round, one per recursive-doubling step beyond gather_nodes."""
    if nodes <= 1:
        return 0
    return nodes - 1 if nodes <= t.gather_nodes else math.ceil(math.log2(nodes))


def round_time(p: Params, t: Tuning, nodes):
    if nodes <= 1:
        return 0.0
    if nodes <= t.gather_nodes:
        return p.alpha_r + (nodes - 2) * p.alpha_p
    return math.ceil(math.log2(nodes)) * p.alpha_r


def rd_switch_bytes(nodes, latency_bytes):
    """The largest allreduce recursive doubling moves faster than the ring on `nodes` nodes,
    where their costs cross (the terms of allreduce_parts, alpha / beta = latency_bytes). The
    daemon's rd_switch_bytes (daemon/config/tuning.cpp) is the same formula: both are checked
    against tests/data/rd_switch_points.json."""
    if nodes <= 2:
        return 0
    ring_steps, ring_bytes = 2.0 * (nodes - 1), 2.0 * (nodes - 1) / nodes
    return int(math.floor((ring_steps - rd_steps(nodes)) / (rd_wire_steps(nodes) - ring_bytes) *
                          latency_bytes))


def switch_bytes(t: Tuning, nodes):
    """The recursive-doubling limit the daemon's auto uses (allreduce_switch_bytes)."""
    if t.small_bytes is not None:
        return t.small_bytes
    return min(rd_switch_bytes(nodes, t.latency_bytes), t.max_auto_switch)


def collective_switch_bytes(t: Tuning):
    """The other collectives' limit for Open MPI's trees (collective_switch_bytes)."""
    return 64 * KIB if t.small_bytes is None else t.small_bytes


def algorithm(t: Tuning, size, nodes, compress='none', loaded=False):
    """Which path an allreduce of `size` bytes takes on `nodes` nodes (inter_node.cpp). A
    compressed one is never eager and always takes the ring, the only algorithm that
    re-encodes per step. `loaded`: other transfers are on the network (in a training step),
    where the daemon takes the ring on up to loaded_ring_nodes (choose_allreduce)."""
    if nodes <= 1:
        return 'local'
    if compress != 'none':
        return 'ring'
    if size <= t.eager_bytes:
        return 'eager'
    if nodes > 2 and size <= switch_bytes(t, nodes) and not (loaded and
                                                            nodes <= t.loaded_ring_nodes):
        return 'recursive_doubling'
    return 'ring'


def link_beta(p: Params, nodes, rate, wire_factor=1.0):
    """Seconds per byte on a node's link: the rate times what eta(N) leaves of it."""
    eta = max(0.3, p.eta - p.eta_slope * max(0, nodes - 2))
    return wire_factor / (eta * rate) if rate else 0.0


def with_total(p: Params, parts, beta):
    """parts with 'credit' and 'total': the fixed costs, then the larger of local and wire in
    full and the smaller by overlap_rest; the token bucket's credit shortens the wire. A
    compressed transfer ('codec') goes at the pace of the slower of the link and the
    daemons' encoding and decoding, which run between the ring's steps."""
    fixed = parts['overhead'] + parts['round'] + parts['latency']
    parts['credit'] = min(p.burst_bytes * beta, fixed, parts['wire'])
    wire = max(parts['wire'] - parts['credit'], parts.get('codec', 0.0))
    big, small = max(parts['local'], wire), min(parts['local'], wire)
    parts['total'] = fixed + big + p.overlap_rest * small
    return parts


# Bytes on the wire per f32 byte with --compress (wire_codec.hpp; int8's per-block scales are
# a few bytes in a thousand and left out).
WIRE_FACTOR = {'none': 1.0, 'bf16': 0.5, 'f16': 0.5, 'int8': 0.25}


# The parameter of each wire type's encoding and decoding cost.
CODEC_PARAM = {'bf16': 'codec', 'f16': 'codec', 'int8': 'codec_int8'}


def codec_time(p: Params, size, nodes, compress):
    """The daemons' encoding and decoding of a compressed ring allreduce: each node encodes
    what it sends and decodes what it receives at each of the ring's 2 (N - 1) steps, 2 (N - 1)
    / N of the buffer (one pass over it on 2 nodes, where the parameter is calibrated). The N
    daemons of a simulated cluster share the machine's cores: beyond `cores` daemons their
    codec work takes N / cores longer (a real node's daemon has cores of its own: the
    projection's `cores` is unbounded)."""
    if compress == 'none' or nodes <= 1:
        return 0.0
    per_byte = getattr(p, CODEC_PARAM[compress])
    return per_byte * size * 2 * (nodes - 1) / nodes * max(1.0, nodes / p.cores)


def allreduce_parts(p: Params, t: Tuning, size, nodes, ranks, rate, compress='none',
                    loaded=False):
    """The terms of one allreduce, seconds each: a dict with 'total'. `compress`: the wire
    type of an f32 allreduce (nodecomm-bench --compress): the wire carries its bytes, and the
    transfer goes no faster than the daemons encode and decode ('codec', codec_time)."""
    k = oversubscription(p, nodes, ranks)
    beta = link_beta(p, nodes, rate, WIRE_FACTOR[compress])
    parts = {
        'overhead': k * (p.o1 + p.o2 * (ranks - 1)),
        'local': size * (p.l1 * ranks + p.l2 * (ranks - 1)) +
                 max(0, size - p.cache_bytes) * (p.l3 * ranks + p.l4 * (ranks - 1)),
        'round': k * round_time(p, t, nodes),
        'latency': 0.0,
        'wire': 0.0,
        'codec': codec_time(p, size, nodes, compress),
        'algorithm': algorithm(t, size, nodes, compress, loaded),
    }
    alg = parts['algorithm']
    if alg == 'eager':
        parts['latency'] = round_records(t, nodes) * size * p.eager_byte
    elif alg == 'recursive_doubling':
        # The nodes beyond a power of two fold in and out (2 steps of all N); in between only
        # p daemons exchange, the others parked (with k(N) on every step, 16 KiB on 6 x 2 came
        # out long in 13 of the 19 checks' points, median +14 %).
        folds = rd_folds(nodes)
        parts['latency'] = (k * folds + oversubscription(p, pow2_floor(nodes), ranks) *
                            (rd_steps(nodes) - folds)) * p.alpha_m
        parts['wire'] = rd_wire_steps(nodes) * size * beta
    elif alg == 'ring' and t.halving:
        # What if (not in the daemon): recursive halving then doubling (Rabenseifner), the
        # ring's bytes in 2 log2 p steps, plus folding the nodes beyond p in and out.
        p2 = pow2_floor(nodes)
        parts['algorithm'] = 'halving_doubling'
        parts['latency'] = k * (2 * (p2.bit_length() - 1) + rd_folds(nodes)) * p.alpha_m
        parts['wire'] = (2 * (p2 - 1) / p2 + rd_folds(nodes)) * size * beta
    elif alg == 'ring':
        parts['wire'] = 2 * (nodes - 1) / nodes * size * beta
        link = link_beta(p, nodes, rate)  # the scheduler's units count uncompressed bytes
        unit, _ = sched_units(t, nodes, link)
        step = step_latency(p, k, min(size, unit) / nodes * beta)
        parts['latency'] = ring_latency(t, size, nodes, step, parts['wire'], link)
    return with_total(p, parts, beta)


def step_latency(p: Params, k, transfer):
    """One message step of the ring beyond its transfer (`transfer`: the step's seconds on the
    link): the message latency alpha_m, plus the oversubscription's wait for a time slice
    ((k - 1) alpha_m) where the transfer does not cover it. The ring's slices stream from each
    daemon to the next without a global step, so a daemon waiting for its core loses nothing
    while its neighbour's bytes are still on the slow link. Measured 2026-12-06 on 8 nodes:
    256 KiB (14 steps of 32 KiB, 280 us each on the link) took 3.88 ms, the link's time alone,
    where 14 waits as long as the 8-byte operation's would add 2.4 ms. Recursive doubling's
    pairs exchange whole buffers and wait for each other at every step: its steps keep
    k alpha_m (with the ring's form, 16 KiB on 6 and 8 nodes came out 26-39 % short)."""
    return p.alpha_m + max(0.0, (k - 1) * p.alpha_m - transfer)


def allreduce_time(p: Params, t: Tuning, size, nodes, ranks, rate, compress='none'):
    return allreduce_parts(p, t, size, nodes, ranks, rate, compress)['total']


def collective_parts(p: Params, t: Tuning, kind, size, nodes, ranks, rate):
    """The other collectives between nodes, as the daemon runs them (collective_algorithms.cpp,
    `--collective-algorithm auto`): `size` is the whole vector (reduce_scatter's input,
    allgather's output, the broadcast or reduced buffer), in bytes. Under auto, buffers up to
    64K on three nodes or more take Open MPI's trees (log2 N steps, the whole buffer on each);
    the rest nodecomm's pipelined ring (reduce_scatter, allgather: N - 1 steps, (N - 1)/N of
    the vector on each link) or chain (broadcast, reduce: the buffer once on every link, slices
    of at least 64K, at least 40 per hop, and the chain's fill of N - 2 slices)."""
    k = oversubscription(p, nodes, ranks)
    beta = link_beta(p, nodes, rate)
    local = {
        'reduce_scatter': size * p.l2 * (ranks - 1) + size / max(nodes, 1) * p.l1 * ranks,
        'allgather': size * p.l1 * ranks,
        'broadcast': size * p.l1 * ranks,
        'reduce': size * p.l2 * (ranks - 1) + size * p.l1,
    }[kind]
    parts = {'overhead': k * (p.o1 + p.o2 * (ranks - 1)), 'local': local,
             'round': k * round_time(p, t, nodes), 'latency': 0.0, 'wire': 0.0}
    if nodes <= 1:
        parts['algorithm'] = 'local'
    elif nodes > 2 and size <= collective_switch_bytes(t):
        steps = math.ceil(math.log2(nodes))
        parts['algorithm'] = 'mpi_tree'
        parts['latency'] = k * steps * p.alpha_m
        parts['wire'] = steps * size * beta
    elif kind in ('reduce_scatter', 'allgather'):
        parts['algorithm'] = 'ring'
        parts['latency'] = k * (nodes - 1) * p.alpha_m
        parts['wire'] = (nodes - 1) / nodes * size * beta
    else:
        hops = nodes - 1
        slice_bytes = max(64 * KIB, size / max(40 * hops, 1))
        slice_bytes = min(slice_bytes, size)
        parts['algorithm'] = 'chain'
        parts['latency'] = k * hops * p.alpha_m
        parts['wire'] = (size + (hops - 1) * slice_bytes) * beta
    return with_total(p, parts, beta)


# The scheduler's bounds on its window and its units (engine/schedule.hpp).
WINDOW_BYTES = (256 * KIB, 64 * MIB)
UNIT_BYTES = (64 * KIB, 4 * MIB)


def sched_units(t: Tuning, nodes, beta):
    """(unit bytes, units in flight at once) of the negotiated scheduler (CommSchedule::window
    and ::chunk): the window keeps target_us of link time queued on each of the ring's links,
    2 (N - 1) x rate x target, and a large allreduce is cut into units of a quarter of it."""
    rate = 1 / beta if beta else 0.0
    window = min(max(rate * 2 * (max(nodes, 2) - 1) * t.target_us / 1e6, WINDOW_BYTES[0]),
                 WINDOW_BYTES[1])
    unit = min(max(window / 4, UNIT_BYTES[0]), UNIT_BYTES[1])
    return unit, max(1, int(window // unit))


def ring_latency(t: Tuning, size, nodes, step, wire, beta):
    """The ring's message steps: each scheduler unit is its own ring of 2 (N - 1) steps, and at
    most a window's units run at once, so an allreduce of more units than that pays the steps
    once per wave of units. The first wave's are exposed; the later waves' only where they
    outlast the transfer (with many nodes and a short per-step transfer)."""
    one = 2 * (nodes - 1) * step
    unit, in_flight = sched_units(t, nodes, beta)
    waves = math.ceil(math.ceil(size / unit) / in_flight)
    return one + max(0.0, (waves - 1) * one - wire)


def ring_flat_time(alpha, beta, size, procs):
    """A flat ring over every process (Open MPI's ring allreduce): 2 (P - 1) steps."""
    if procs <= 1:
        return 0.0
    return 2 * (procs - 1) * alpha + 2 * (procs - 1) / procs * size * beta
