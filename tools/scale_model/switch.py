"""The defaults the model drives (issue 20, item 4): the recursive-doubling/ring switch (the
model's crossover for each node count, the latency-bytes (alpha / beta) of this machine and of
the projection's fabrics, the switch measured on this machine by running both algorithms side
by side, and the cap on auto's switch from step times), and the node count up to which the
daemon holds for urgent operations (hold_costs)."""
import dataclasses
import json
import os
import statistics

from . import fabrics, measure, model, workload

KIB = model.KIB
TABLE_NODES = [3, 4, 5, 6, 7, 8, 16, 64, 256, 1024, 4096]
TABLE_LATENCY_BYTES = [1 * KIB, 16 * KIB, 128 * KIB]


def table():
    """The shared table (tests/data/rd_switch_points.json): the switch for each node count
    and latency-bytes, which the model and the daemon must both reproduce."""
    return {'max_auto_switch_bytes': model.Tuning().max_auto_switch,
            'nodes': TABLE_NODES, 'latency_bytes': TABLE_LATENCY_BYTES,
            'switch_bytes': [[model.rd_switch_bytes(n, x) for n in TABLE_NODES]
                             for x in TABLE_LATENCY_BYTES]}


def machine_latency_bytes(p: model.Params, nodes, ranks, rate):
    """alpha / beta of this machine's simulated links for a layout: one message step (with the
    time slices it waits for) in bytes of the link."""
    parts = model.allreduce_parts(p, model.Tuning(small_bytes=0), 64 * KIB, nodes, ranks, rate)
    steps = 2 * (nodes - 1)
    return parts['latency'] / steps * p.eta * rate


def fabric_latency_bytes(name, base: model.Params):
    rate, latency, eta, _ = fabrics.FABRICS[name]
    return (latency + base.o1 / 2) * eta * rate


def measured_switch(runner, nodes, ranks, rate, sizes, reps):
    """Times of both algorithms per size (medians of `reps` runs, alternating) and the
    largest size where recursive doubling is still faster."""
    times = {'rd': [], 'ring': []}
    for _ in range(reps):
        for alg in ('rd', 'ring'):
            times[alg].append(runner.allreduce(
                nodes, ranks, rate, sizes, daemon_args=[f'--allreduce-algorithm={alg}']))
    rows = []
    for i, size in enumerate(sizes):
        rd = statistics.median(run[i][1] for run in times['rd'])
        ring = statistics.median(run[i][1] for run in times['ring'])
        rows.append({'size': size, 'rd_s': rd, 'ring_s': ring})
    faster = [r['size'] for r in rows if r['rd_s'] < r['ring_s']]
    return rows, (max(faster) if faster else 0)


# The projection's workloads and compute per step (docs/SCALING.md, "Workloads"), which
# `project` and `switch --steps` use.
STEP_WORKLOADS = [('resnet50', 213.0), ('bert-large', 441.0)]
STEP_CAPS = [32 * KIB, 64 * KIB, 128 * KIB, 256 * KIB, 512 * KIB, 1024 * KIB]
STEP_NODES = [8, 32, 128, 512, 1024, 4096]


def step_caps(base, layers_of, workloads, ranks):
    """Step time under each cap on auto's switch, per fabric, workload and node count, and
    each cap's worst loss against the best cap there: the cap the daemon uses is the one
    whose worst loss is least (kMaxAutoSwitchBytes)."""
    from .cli import fabric_params
    rows, worst = [], {c: 0.0 for c in STEP_CAPS}
    for wname, compute_ms in workloads:
        layers = layers_of(wname, compute_ms)
        for fname in fabrics.FABRICS:
            p, rate = fabric_params(base, fname)
            x = int(fabric_latency_bytes(fname, base))
            for nodes in STEP_NODES:
                steps = {c: workload.step_times(
                    p, model.Tuning(latency_bytes=x, max_auto_switch=c), layers, nodes, ranks,
                    rate)['t_step'] for c in STEP_CAPS}
                best = min(steps.values())
                for c in STEP_CAPS:
                    worst[c] = max(worst[c], steps[c] / best - 1)
                rows.append({'workload': wname, 'fabric': fname, 'nodes': nodes,
                             'step_s': {str(c): s for c, s in steps.items()}})
    return rows, worst


HOLD_NODES = [2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096]
# What a hold may cost a training step at most where the daemon holds (kHoldMaxNodes).
HOLD_COST_BOUND = 0.10


def hold_costs(base, layers_of, workloads, ranks):
    """What holding for urgent operations costs a step (t_step with holds against without,
    minus 1) per fabric, workload and node count, and the largest node count up to which it
    costs at most HOLD_COST_BOUND everywhere: the daemon's kHoldMaxNodes."""
    from .cli import fabric_params
    rows, worst = [], {n: 0.0 for n in HOLD_NODES}
    for wname, compute_ms in workloads:
        layers = layers_of(wname, compute_ms)
        for fname in fabrics.FABRICS:
            p, rate = fabric_params(base, fname)
            t = model.Tuning(latency_bytes=int(fabric_latency_bytes(fname, base)))
            cost = {}
            for nodes in HOLD_NODES:
                held, free = (workload.step_times(p, dataclasses.replace(t, hold_max_nodes=h),
                                                  layers, nodes, ranks, rate)['t_step']
                              for h in (HOLD_NODES[-1], 0))
                cost[nodes] = held / free - 1
                worst[nodes] = max(worst[nodes], cost[nodes])
            rows.append({'workload': wname, 'fabric': fname,
                         'cost': {str(n): c for n, c in cost.items()}})
    within = [n for n in HOLD_NODES if all(worst[m] <= HOLD_COST_BOUND for m in HOLD_NODES
                                           if m <= n)]
    return rows, worst, (max(within) if within else 0)


def cmd_switch(a, load_params):
    t = model.Tuning()
    if a.table:
        with open(a.table, 'w') as f:
            json.dump(table(), f, indent=1)
            f.write('\n')
    out = {'default_latency_bytes': t.latency_bytes,
           'default_switch': {n: model.switch_bytes(t, n) for n in TABLE_NODES}}
    print(f"# the daemon's defaults (--latency-bytes {t.latency_bytes // KIB}K, at most "
          f"{t.max_auto_switch // KIB}K): switch per node count")
    print('  '.join(f"{n}:{model.switch_bytes(t, n) // KIB}K" for n in TABLE_NODES))
    if a.params:
        base = load_params(a.params)
        rb = measure.rate_bytes(a.rate)
        out['machine'] = {}
        for nodes in a.nodes:
            x = machine_latency_bytes(base, nodes, a.ranks, rb)
            out['machine'][nodes] = x
            print(f"this machine {nodes}x{a.ranks} {a.rate}: latency-bytes {x / KIB:.1f}K, "
                  f"switch {model.rd_switch_bytes(nodes, int(x)) / KIB:.1f}K")
        out['fabrics'] = {}
        for name in fabrics.FABRICS:
            x = fabric_latency_bytes(name, base)
            out['fabrics'][name] = x
            print(f"{name:>7}: latency-bytes {x / KIB:.0f}K; switch at 8, 256, 4096 nodes "
                  f"{model.rd_switch_bytes(8, int(x)) / KIB:.0f}K "
                  f"{model.rd_switch_bytes(256, int(x)) / KIB:.0f}K "
                  f"{model.rd_switch_bytes(4096, int(x)) / KIB:.0f}K")
    if a.steps:
        if not a.params:
            raise SystemExit('switch --steps needs --params')
        bench = os.path.join(a.build, 'bin', 'nodecomm-bench')
        base = load_params(a.params)
        layers = {}

        def layers_of(w, ms):
            if (w, ms) not in layers:
                layers[(w, ms)] = workload.bench_layers(bench, w, 1.0, ms)
            return layers[(w, ms)]

        rows, worst = step_caps(base, layers_of, STEP_WORKLOADS, 8)
        for r in rows:
            print(f"{r['workload']:>10} {r['fabric']:>7} {r['nodes']:>5}: step ms per cap "
                  + ' '.join(f"{c // KIB}K {r['step_s'][str(c)] * 1e3:.1f}" for c in STEP_CAPS))
        best = min(STEP_CAPS, key=lambda c: worst[c])
        print('# worst loss per cap: ' + ', '.join(f"{c // KIB}K {100 * w:.1f} %"
                                                  for c, w in worst.items()) +
              f"; least: {best // KIB}K (the daemon's: {t.max_auto_switch // KIB}K)")
        out['steps'] = {'rows': rows, 'worst_loss': {str(c): w for c, w in worst.items()},
                        'best_cap': best}
        rows, worst, bound = hold_costs(base, layers_of, STEP_WORKLOADS, 8)
        for r in rows:
            print(f"{r['workload']:>10} {r['fabric']:>7}: holds cost the step "
                  + ' '.join(f"{n}:{100 * c:+.1f}%" for n, c in r['cost'].items()))
        print(f"# holds cost at most {100 * HOLD_COST_BOUND:.0f} % everywhere up to {bound} "
              f"nodes (the daemon's --sched-hold-max-nodes: {t.hold_max_nodes})")
        out['holds'] = {'rows': rows, 'worst_cost': {str(n): w for n, w in worst.items()},
                        'bound': HOLD_COST_BOUND, 'max_nodes': bound}
    if a.measure:
        runner = measure.Runner(a.build, timeout=a.timeout)
        out['measured'] = []
        for nodes in a.nodes:
            rows, last = measured_switch(runner, nodes, a.ranks, a.rate, a.sizes, a.reps)
            for r in rows:
                print(f"{nodes}x{a.ranks} {r['size']:>8}: rd {r['rd_s'] * 1e3:8.3f} ms, ring "
                      f"{r['ring_s'] * 1e3:8.3f} ms", flush=True)
            print(f"# {nodes}x{a.ranks}: rd faster up to {last // KIB}K; the default's switch "
                  f"{model.switch_bytes(t, nodes) / KIB:.1f}K", flush=True)
            out['measured'].append({'nodes': nodes, 'ranks': a.ranks, 'rate': a.rate,
                                    'rows': rows, 'rd_faster_up_to': last})
    if a.out:
        with open(a.out, 'w') as f:
            json.dump(out, f, indent=1)
    return 0
