"""A training step of `nodecomm-bench --workload` under the model: each layer computes, then
posts its gradient's allreduce with its backprop position as priority; the daemons move the
ready operations' bytes highest priority first, a slice at a time (the scheduler's units), so
a later layer's allreduce overtakes an earlier one's remaining bytes. An operation's fixed
costs (hand-offs, the round, its algorithm's message latency) delay when its bytes may start
and when it completes, but do not occupy the link: other operations' bytes flow meanwhile.
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
    in backprop order, each (name, f32 elements, compute_us)."""
    now = 0.0
    ops = []  # [ready_at, bytes_left_as_wire_seconds, fixed_tail, priority, index]
    for i, (_, elements, compute_us) in enumerate(layers):
        if compute:
            now += compute_us / 1e6
        parts = allreduce_parts(p, t, elements * 4, nodes, ranks, rate)
        wire = parts['wire'] - parts['credit']
        big = max(parts['local'], wire)
        small = min(parts['local'], wire)
        head = parts['overhead'] + parts['round']
        ops.append({'ready': now + head, 'work': big + p.overlap_rest * small,
                    'tail': parts['latency'], 'bytes': elements * 4, 'prio': i})
    compute_end = now
    clock = 0.0
    last = 0.0
    pending = sorted(ops, key=lambda o: o['ready'])
    ready = []
    while pending or ready:
        while pending and pending[0]['ready'] <= clock:
            ready.append(pending.pop(0))
        if not ready:
            clock = pending[0]['ready']
            continue
        op = max(ready, key=lambda o: o['prio'])
        # One unit of its work, or until a higher-priority operation becomes ready.
        share = op['work'] * min(1.0, UNIT / op['bytes']) if op['bytes'] else op['work']
        step = min(op['work'], share)
        if pending and pending[0]['prio'] > op['prio']:
            step = min(step, max(pending[0]['ready'] - clock, 1e-9))
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
