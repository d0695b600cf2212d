"""A training step of `nodecomm-bench --workload` under the model: each layer computes, then
posts its gradient's allreduce with its backprop position as priority; the daemons move the
ready operations' bytes highest priority first, a slice at a time (the scheduler's units), so
a later layer's allreduce overtakes an earlier one's remaining bytes. Rounds admit
operations one round at a time (fused: one algorithm latency per round's group); an
operation's fixed costs delay when its bytes may start.

A held operation's message steps (the round's group's latency) occupy the link too: the
priorities rise through a step, so every operation is more urgent than those on the network,
and the daemon holds their units while it runs (daemon/engine/urgency.cpp): nothing else
moves while its steps wait for their messages and their cores. Measured 2026-12-07 on 8 x 2 at
1 Gbit/s (ResNet-50 at scale 0.25): 580-749 ms a step when every operation was held for in
turn, 444-460 with `--sched-hold-us=0`. Since, the daemon holds for a stream of rising
priorities only at its end and for at most hold_us after an operation became ready (453-531 ms
a step there), and simulate() applies the same rules. Without holds (more nodes than
Tuning.hold_max_nodes, or it 0) the steps are hidden: other operations' bytes flow meanwhile.
"""
import subprocess

from .model import Tuning, allreduce_parts

UNIT = 1 << 20  # bytes of one operation moved before the next decision (a scheduler unit)


def read_layers(text):
    """`name elements compute_us` lines (nodecomm-bench --print-layers, or a FILE)."""
    layers = []
    for line in text.splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        layers.append((parts[0], int(parts[1]), float(parts[2]) if len(parts) > 2 else 0.0))
    return layers


def bench_layers(bench, workload, scale=1.0, compute_ms=None):
    """The layers nodecomm-bench would run (its own profiles and compute split)."""
    cmd = [bench, '--workload', workload, '--scale', repr(scale), '--print-layers']
    if compute_ms is not None:
        cmd += ['--compute-ms', repr(compute_ms)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout
    return read_layers(out)


def simulate(p, t: Tuning, layers, nodes, ranks, rate, compute=True):
    """(finish time of the last allreduce, end of compute), seconds, for one step. Layers are
    in backprop order, each (name, f32 elements, compute_us).

    The scheduler admits operations in rounds, one round at a time per communicator: a round
    starts once an operation is ready and the previous round has ended, takes round(N), and
    admits every operation ready at its start (fused: they share one algorithm latency). The
    link then moves the admitted operations' bytes highest priority first, a unit at a time."""
    now = 0.0
    ops = []
    round_s = 0.0
    hold = nodes <= t.hold_max_nodes
    for i, (_, elements, compute_us) in enumerate(layers):
        if compute:
            now += compute_us / 1e6
        # The link is busy for most of a step: the daemons' loaded-link choice.
        parts = allreduce_parts(p, t, elements * 4, nodes, ranks, rate, loaded=True)
        round_s = parts['round']
        # No token-bucket credit: in a step the link is kept busy by the other operations, so
        # the bucket does not refill during one operation's fixed costs.
        wire = parts['wire']
        big = max(parts['local'], wire)
        small = min(parts['local'], wire)
        ops.append({'ready': now + parts['overhead'], 'work': big + p.overlap_rest * small,
                    'tail': parts['latency'], 'bytes': elements * 4, 'prio': i})
    compute_end = now
    # Rounds: when each operation becomes movable.
    order = sorted(ops, key=lambda o: o['ready'])
    round_end = 0.0
    j = 0
    groups = []
    while j < len(order):
        start = max(round_end, order[j]['ready'])
        round_end = start + round_s
        group = []
        while j < len(order) and order[j]['ready'] <= start:
            group.append(order[j])
            j += 1
        groups.append((start, group))
    # The daemon's holds (daemon/engine/urgency.cpp), group by group: each group's most urgent
    # operation is held for from its arrival until it completes, at most hold_us after it
    # became ready. A more urgent arrival while a hold lasts (or within a stream) starts a
    # stream: no hold until hold_stream_us passes without one, then one for the newest.
    stream = t.hold_stream_us / 1e6
    stream_until = holding_until = float('-inf')
    for g, (start, group) in enumerate(groups):
        tail = max(o['tail'] for o in group)
        lead = max(group, key=lambda x: x['prio'])
        for o in group:
            o['movable'] = start + round_s
            o['tail'] = tail if o is lead else 0.0
        if not hold:
            continue
        if stream and (start < holding_until or start < stream_until):
            stream_until = start + stream
        hold_from = max(start, stream_until)
        # The hold lasts until the next arrival cuts it (a stream), it completes, or hold_us.
        cut = groups[g + 1][0] if g + 1 < len(groups) else float('inf')
        end = min(max(lead['movable'], hold_from) + lead['work'] + tail,
                  lead['ready'] + t.hold_us / 1e6)
        # The links idle for its steps while it is held: at most its steps' time.
        idle = min(tail, max(0.0, min(end, cut if stream else end) - hold_from))
        lead['work'] += idle
        lead['tail'] = tail - idle
        holding_until = end if idle > 0 else float('-inf')
    clock = 0.0
    last = 0.0
    pending = sorted(ops, key=lambda o: o['movable'])
    ready = []
    while pending or ready:
        while pending and pending[0]['movable'] <= clock:
            ready.append(pending.pop(0))
        if not ready:
            clock = pending[0]['movable']
            continue
        op = max(ready, key=lambda o: o['prio'])
        # One unit of its work, or until a higher-priority operation becomes movable.
        share = op['work'] * min(1.0, UNIT / op['bytes']) if op['bytes'] else op['work']
        step = min(op['work'], share)
        if pending and pending[0]['prio'] > op['prio']:
            step = min(step, max(pending[0]['movable'] - clock, 1e-9))
        clock += step
        op['work'] -= step
        if op['work'] <= 1e-12:
            ready.remove(op)
            last = max(last, clock + op['tail'])
    return last, compute_end


def step_times(p, t, layers, nodes, ranks, rate):
    """The bench's three passes: t_compute, t_comm (everything posted at once), t_step."""
    comm, _ = simulate(p, t, [(n, e, 0.0) for n, e, _ in layers], nodes, ranks, rate, False)
    last, compute_end = simulate(p, t, layers, nodes, ranks, rate, True)
    return {'t_compute': compute_end, 't_comm': comm, 't_step': max(last, compute_end)}
