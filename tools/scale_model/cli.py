"""tools/scale-model: calibrate, predict, check, project (docs/SCALING.md)."""
import argparse
import dataclasses
import json
import math
import os
import statistics
import sys

from . import chunks, fabrics, fit, measure, model, plots, switch, workload

KIB, MIB = model.KIB, model.MIB
CAL_SIZES = [8, 1 * KIB, 4 * KIB, 64 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
CHECK_SIZES = [8, 1 * KIB, 16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB]
# Scaled so that a step takes about a second on 1 Gbit/s links (compute: the default, the
# gradients' bytes / 125 MB/s).
WORKLOADS = {'resnet50': 0.25, 'bert-large': 0.02}


def parse_sizes(text):
    from_unit = {'K': KIB, 'M': MIB, 'G': 1024 * MIB}
    out = []
    for item in text.split(','):
        item = item.strip()
        out.append(int(float(item[:-1]) * from_unit[item[-1].upper()])
                   if item[-1].upper() in from_unit else int(item))
    return out


def load_params(path):
    with open(path) as f:
        d = json.load(f)
    return model.Params.from_json(d['params'] if 'params' in d else d)


# The layouts calibration measures: 1 node (the hand-offs and local costs alone), then 2, 3,
# 4 and 8 nodes (the round's cost per further peer, the link efficiency's slope, and how the
# latencies grow as the simulated nodes' daemons outnumber the cores). 6 nodes and 3 x 2 are
# left to the check, which predicts them from the rest.
CAL_LAYOUTS = ((1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (8, 1), (8, 2))


def calibration_job(runner, rate, runs):
    """A pass of the calibration as a measure.interleaved_jobs job, with what takes its result:
    (keys, sizes, launch, collect), CAL_LAYOUTS each over CAL_SIZES; collect appends each
    point's run to `runs`."""
    def collect(measured):
        for (nodes, ranks), (sized, _, _) in measured.items():
            for size, sec in sized:
                runs.setdefault((nodes, ranks, size), []).append(sec)

    return (CAL_LAYOUTS, CAL_SIZES,
            lambda layout, sizes, reps: runner.allreduce(*layout, rate, sizes, reps=reps),
            collect)


def calibration_pass(runner, rate, runs):
    """One pass over CAL_LAYOUTS, each over CAL_SIZES, the launches interleaved
    (measure.interleaved_pass): each point's run appended to `runs`."""
    keys, sizes, launch, collect = calibration_job(runner, rate, runs)
    collect(measure.interleaved_pass(runner, keys, sizes, launch))


def calibration_points(runner, rate, reps=1):
    """The measurements calibration fits: CAL_LAYOUTS, each over CAL_SIZES, the median of
    `reps` passes over the layouts per point (spread out, as the check's)."""
    runs = {}
    for _ in range(reps):
        calibration_pass(runner, rate, runs)
    return median_points(runs, rate)


def median_points(runs, rate):
    """Calibration points from the passes in `runs` (calibration_pass): each point's median."""
    rb = measure.rate_bytes(rate)
    return [(size, nodes, ranks, rb, statistics.median(runs[(nodes, ranks, size)]))
            for nodes, ranks in CAL_LAYOUTS for size in CAL_SIZES]


def codec_points(runner, rate, reps, compress):
    """Allreduces of 1-64 MiB on 2 nodes x 1 rank with a wire type: the codec's cost."""
    rb = measure.rate_bytes(rate)
    sizes = [s for s in CAL_SIZES if s >= MIB]
    runs = [runner.allreduce(2, 1, rate, sizes, compress=compress) for _ in range(reps)]
    return [(size, 2, 1, rb, statistics.median(r[i][1] for r in runs), compress)
            for i, size in enumerate(sizes)]


def cmd_calibrate(a):
    if a.points:
        with open(a.points) as f:
            points = [tuple(p) for p in json.load(f)['points']]
    else:
        runner = measure.Runner(a.build, timeout=a.timeout, statistic=a.statistic,
                                small_reps=a.small_reps)
        points = (codec_points(runner, a.rate, a.reps, a.compress) if a.compress
                  else calibration_points(runner, a.rate, a.reps))
    base = load_params(a.base) if a.base else None
    if a.fit or a.compress:
        names = a.fit.split(',') if a.fit else fit.FITTED
        params, rms = fit.calibrate(points, base=base, names=names)
    else:
        names = fit.LOCAL + fit.NETWORK + ('contention_power', 'rank_weight')
        params, rms = fit.calibrate_staged(points, base=base)
    if base is not None and a.fit:
        params.source['fit'] = base.source.get('fit', '')  # the rest's, not these points'
    params.source['calibrated_on' if not a.fit else f'{a.fit}_calibrated_on'] = (
        f"rate {a.rate}, {len(points)} points ({a.statistic} of the iterations), "
        f"log rms {rms:.3f}")
    if a.base:
        # The base's points stay with it: these are only what the listed parameters were fitted on.
        with open(a.base) as f:
            points = json.load(f).get('points', []) + [list(pt) for pt in points]
    out = {'params': params.to_json(), 'rate': a.rate, 'statistic': a.statistic,
           'points': points}
    text = json.dumps(out, indent=1)
    if a.out:
        with open(a.out, 'w') as f:
            f.write(text + '\n')
    for name in names:
        print(f"{name:>16} {getattr(params, name):.4g}")
    print(f"# fitted over {len(points)} points, rms of log(pred/meas) {rms:.3f}")
    return 0


def predict_rows(p, t, sizes, nodes, ranks, rate, op='allreduce', compress='none'):
    rb = measure.rate_bytes(rate)
    rows = []
    for s in sizes:
        parts = (model.allreduce_parts(p, t, s, nodes, ranks, rb, compress) if op == 'allreduce'
                 else model.collective_parts(p, t, op, s, nodes, ranks, rb))
        rows.append({'op': op, 'compress': compress, 'size': s, 'nodes': nodes, 'ranks': ranks,
                     'rate': rate,
                     'algorithm': parts['algorithm'], 'predicted_s': parts['total'],
                     'parts': {k: v for k, v in parts.items() if k not in ('algorithm',)}})
    return rows


def cmd_predict(a):
    p = load_params(a.params)
    t = model.Tuning()
    out = []
    for nodes in a.nodes:
        for ranks in a.ranks:
            out += predict_rows(p, t, a.sizes, nodes, ranks, a.rate, a.op, a.compress)
            for w in a.workload or []:
                name, scale = w.split(':') if ':' in w else (w, WORKLOADS.get(w, 1.0))
                layers = workload.bench_layers(os.path.join(a.build, 'bin', 'nodecomm-bench'),
                                               name, float(scale))
                times = workload.step_times(p, t, layers, nodes, ranks,
                                            measure.rate_bytes(a.rate))
                out.append({'workload': name, 'scale': float(scale), 'nodes': nodes,
                            'ranks': ranks, 'rate': a.rate, **times})
    print(json.dumps(out, indent=1))
    return 0


def error_table(rows):
    errs = [abs(r['error']) for r in rows]
    return (statistics.median(errs), max(errs)) if errs else (0.0, 0.0)


def steal_summary(rows, bound=0.25):
    """A line on the hypervisor's steal during the measured runs (rows' 'steal'), overall and
    for the points beyond `bound`, or None where no run recorded it (an older check)."""
    def stolen(rs):
        return [x for r in rs for x in r.get('steal') or [] if x is not None]
    every = stolen(rows)
    if not every:
        return None
    text = (f"# host steal during the runs: median {100 * statistics.median(every):.1f} %, "
            f"{100 * min(every):.1f}-{100 * max(every):.1f} %")
    off = stolen([r for r in rows if abs(r['error']) > bound])
    if off:
        text += (f"; the points beyond {100 * bound:.0f} %: "
                 f"median {100 * statistics.median(off):.1f} %")
    return text


def spread_summary(rows, bound=0.25):
    """A line on how far a point's own runs (one per pass) lie from their median, which is
    what the model predicts: where a run is itself more than `bound` away, no prediction can
    be within `bound` of every pass, and the median of three moves with the pass that
    decides it. None where no point has two runs."""
    def spread(r):
        med = statistics.median(r['runs_s'])
        return max(abs(x / med - 1) for x in r['runs_s'])
    spreads = [(spread(r), r) for r in rows if len(r.get('runs_s') or []) > 1]
    if not spreads:
        return None
    every = [x for x, _ in spreads]
    largest, worst = max(spreads, key=lambda pair: pair[0])
    text = (f"# a point's runs from their median: median {100 * statistics.median(every):.1f} %, "
            f"largest {100 * largest:.1f} % ({worst['what']} {worst['nodes']}x"
            f"{worst['ranks']} {worst['rate']}); {sum(x > bound for x in every)} points have a "
            f"run beyond {100 * bound:.0f} %")
    off = [x for x, r in spreads if abs(r['error']) > bound]
    if off:
        text += (f"; the points beyond {100 * bound:.0f} %: their runs "
                 + ', '.join(f'{100 * x:.0f} %' for x in off))
    return text


def predict_row(p, t, row, layers_of):
    """The model's time for a measured row of a check: an allreduce or a workload step."""
    rb = measure.rate_bytes(row['rate'])
    if 'size' in row:
        op, compress = row.get('op', 'allreduce'), row.get('compress', 'none')
        if op != 'allreduce':
            return model.collective_parts(p, t, op, row['size'], row['nodes'], row['ranks'],
                                          rb)['total']
        return model.allreduce_time(p, t, row['size'], row['nodes'], row['ranks'], rb, compress)
    layers = layers_of(row['workload'], row['scale'])
    return workload.step_times(p, t, layers, row['nodes'], row['ranks'], rb)['t_step']


def print_row(row):
    unit, digits = (1e3, 3) if 'size' in row else (1e3, 1)
    print(f"{row['what']:>22} {row['nodes']}x{row['ranks']} {row['rate']:>8}: measured "
          f"{row['measured_s'] * unit:9.{digits}f} ms, predicted "
          f"{row['predicted_s'] * unit:9.{digits}f} ms, error {100 * row['error']:+6.1f} %",
          flush=True)


def size_text(size):
    for unit, factor in (('MiB', MIB), ('KiB', KIB)):
        if size >= factor and size % factor == 0:
            return f'{size // factor} {unit}'
    return f'{size} B'


def markdown_table(rows):
    """The error table of docs/SCALING.md: a line per rate and layout, a column per size
    (and per op or compression beyond plain allreduce) and per workload step."""
    def column(r):
        if 'workload' in r:
            return f"{r['workload']} step"
        label = r.get('op', 'allreduce')
        if r.get('compress', 'none') != 'none':
            label += ' ' + r['compress']
        return size_text(r['size']) if label == 'allreduce' else f"{label} {size_text(r['size'])}"
    cols, lines = [], {}
    for r in rows:
        c = column(r)
        if c not in cols:
            cols.append(c)
        cell = f"{100 * r['error']:+.0f} %"
        if 'workload' in r:
            cell += f" ({r['measured_s'] * 1e3:.0f} ms)"
        lines.setdefault((r['rate'], r['nodes'], r['ranks']), {})[c] = cell
    out = ['| rate | nodes × ranks | ' + ' | '.join(cols) + ' |',
           '|---|---|' + '---:|' * len(cols)]
    for (rate, nodes, ranks), cells in lines.items():
        out.append(f'| {rate} | {nodes} × {ranks} | ' +
                   ' | '.join(cells.get(c, '') for c in cols) + ' |')
    return '\n'.join(out)


def check_paths(a):
    """(op, compress) pairs a check measures: each --ops, and allreduce with each --compress."""
    paths = [(op, 'none') for op in a.ops]
    paths += [('allreduce', c) for c in a.compress if c != 'none']
    return paths


def measure_check_rows(a, runner, also=None):
    """The check's measurements: --reps passes over every layout, each point's median over
    the passes; `also`, a (keys, sizes, launch, collect) job (calibration_job), is measured in
    each pass together with the check's allreduces and `collect` given its result (check
    --calibrate). Small operations on this shared machine drift by a third over minutes (6 x 1
    16 KiB: 444 us as the median of 9 launches, 652-684 us five minutes later), so a point's
    runs are spread over the whole check rather than taken back to back, and within a pass the
    launches of its small sizes over the pass (measure.interleaved_jobs)."""
    layouts = [(rate, nodes, ranks) for rate in a.rates for nodes in a.nodes
               for ranks in a.ranks]
    paths = check_paths(a)
    workloads = [(w.split(':')[0], float(w.split(':')[1] if ':' in w else WORKLOADS[w]))
                 for w in a.workloads]
    sizes, steps = {}, {}  # each point's runs, one per pass
    steal = {}  # the host's steal during each run (measure.cpu_jiffies)
    launches = {}  # each run's launches, where the runner keeps them (Runner.last_launches)
    keys = [(layout, op, compress) for layout in layouts for op, compress in paths]

    def launch(key, group, reps):
        (rate, nodes, ranks), op, compress = key
        return runner.collective(nodes, ranks, rate, op, group, compress, reps=reps)

    for rep in range(a.reps):
        print(f"# pass {rep + 1} of {a.reps}" +
              (", with a pass of the calibration" if also else ""), flush=True)
        if also:
            *job, collect = also
            measured, extra = measure.interleaved_jobs(runner, [(keys, a.sizes, launch), job])
            collect(extra)
        else:
            measured = measure.interleaved_pass(runner, keys, a.sizes, launch)
        for key, (runs, kept, stolen) in measured.items():
            for size, sec in runs:
                sizes.setdefault(key + (size,), []).append(sec)
                steal.setdefault(key + (size,), []).append(stolen)
                launches.setdefault(key + (size,), []).append(kept.get(size, [sec]))
        for layout in layouts:
            rate, nodes, ranks = layout
            for name, scale in workloads:
                step, stolen = measure.with_steal(
                    lambda: runner.workload(nodes, ranks, rate, name, scale))
                steps.setdefault((layout, name), []).append(step)
                steal.setdefault((layout, name), []).append(stolen)
    rows = []
    for layout in layouts:
        rate, nodes, ranks = layout
        base = {'nodes': nodes, 'ranks': ranks, 'rate': rate}
        for op, compress in paths:
            label = op if compress == 'none' else f'{op} {compress}'
            for size in a.sizes:
                times = sizes[(layout, op, compress, size)]
                rows.append({**base, 'what': f'{label} {size}', 'size': size, 'op': op,
                             'compress': compress, 'measured_s': statistics.median(times),
                             'runs_s': times, 'steal': steal[(layout, op, compress, size)],
                             'launches_s': launches[(layout, op, compress, size)]})
        for name, scale in workloads:
            meas = steps[(layout, name)]
            t_steps = [m['t_step'] for m in meas]
            rows.append({**base, 'what': f'{name} step', 'workload': name, 'scale': scale,
                         'measured_s': statistics.median(t_steps), 'runs_s': t_steps,
                         'steal': steal[(layout, name)], 'measured': meas})
    return rows


def calibrate_from(a, points=None):
    """`check --calibrate OUT`: calibrate (`calibrate --rate --calibrate-rate`, the check's
    --reps, --statistic and --small-reps), write it to OUT and return its params; fitted on
    `points` where the check measured them, else measured now."""
    args = ['--build', a.build, 'calibrate', '--rate', a.calibrate_rate, '--out', a.calibrate,
            '--reps', str(a.reps), '--statistic', a.statistic, '--small-reps', str(a.small_reps),
            '--timeout', str(a.timeout)]
    if points is not None:
        with open(a.calibrate, 'w') as f:
            json.dump({'points': points}, f)
        args += ['--points', a.calibrate]
    cmd_calibrate(parser().parse_args(args))
    return load_params(a.calibrate)


def measure_calibrated(a, runner):
    """(params, rows) of `check --calibrate`: each of the check's passes measures a pass of the
    calibration too, its small launches in the same rounds as the check's (measure.
    interleaved_jobs), and the fit sees only the calibration's points. On this shared host the
    small operations' latencies drift by a third over an hour (the 19:08 calibration of
    2026-12-06 and a check of the same sitting still 8 points beyond 25 %, all measured
    slower, the later ones more), and within a pass (2026-12-07 21:41, the calibration's pass
    run before the check's: 8 B on 8 x 2 2.00 ms in the calibration, 1.46 ms in the check), so
    calibration and check are measured over the same minutes."""
    runs = {}
    print(f"# the calibration at {a.calibrate_rate}, in every pass", flush=True)
    rows = measure_check_rows(a, runner, calibration_job(runner, a.calibrate_rate, runs))
    return calibrate_from(a, median_points(runs, a.calibrate_rate)), rows


def cmd_check(a):
    if bool(a.params) == bool(a.calibrate):
        raise SystemExit('scale-model check: give one of --params and --calibrate')
    t = model.Tuning()
    bench = os.path.join(a.build, 'bin', 'nodecomm-bench')
    cache = {}

    def layers_of(name, scale):
        if (name, scale) not in cache:
            cache[(name, scale)] = workload.bench_layers(bench, name, scale)
        return cache[(name, scale)]

    if a.replay:
        # The measurements of an earlier check, predicted again (a model change, new params).
        rows = []
        for path in a.replay.split(','):
            with open(path) as f:
                rows += json.load(f)['rows']
        p = calibrate_from(a) if a.calibrate else load_params(a.params)
    else:
        runner = measure.Runner(a.build, timeout=a.timeout, statistic=a.statistic,
                                small_reps=a.small_reps)
        if a.calibrate:
            p, rows = measure_calibrated(a, runner)
        else:
            p = load_params(a.params)
            rows = measure_check_rows(a, runner)
    for row in rows:
        row['predicted_s'] = predict_row(p, t, row, layers_of)
        row['error'] = row['predicted_s'] / row['measured_s'] - 1
        print_row(row)
    median, worst = error_table(rows)
    ok = median <= 0.10 and worst <= 0.25
    if a.markdown:
        print(markdown_table(rows))
    for line in (steal_summary(rows), spread_summary(rows)):
        if line:
            print(line)
    print(f"# {len(rows)} points: median |error| {100 * median:.1f} % (bound 10 %), largest "
          f"{100 * worst:.1f} % (bound 25 %): {'accepted' if ok else 'NOT accepted'}")
    if a.out:
        with open(a.out, 'w') as f:
            json.dump({'params': p.to_json(), 'params_from': a.calibrate or a.params,
                       'statistic': a.statistic, 'rows': rows,
                       'median_error': median,
                       'max_error': worst, 'accepted': ok}, f, indent=1)
    return 0 if ok else 1


def fabric_params(base: model.Params, name):
    rate, latency, eta, _ = fabrics.FABRICS[name]
    d = base.to_json()
    # The daemon on dedicated cores: no oversubscription; message steps cost the fabric's
    # latency plus what the daemon adds on this machine beyond the simulated link's.
    d.update(alpha_m=latency + base.o1 / 2, alpha_r=latency + base.o1 / 2,
             alpha_p=latency / 4, eta=eta, eta_slope=0.0, contention=0.0, cores=1 << 20,
             burst_bytes=0)
    return model.Params.from_json(d), rate


def cmd_project(a):
    base = load_params(a.params)
    bench = os.path.join(a.build, 'bin', 'nodecomm-bench')
    nodes_list = [1 << i for i in range(int(math.log2(a.max_nodes)) + 1)]
    out = {'fabrics': {}, 'workloads': {}}
    for wname, compute_ms in a.workloads:
        layers = workload.bench_layers(bench, wname, 1.0, compute_ms)
        grad = sum(e for _, e, _ in layers) * 4
        out['workloads'][wname] = {'compute_ms': compute_ms, 'gradient_bytes': grad}
        for fname in a.fabrics:
            p, rate = fabric_params(base, fname)
            # The operator's one setting per fabric: --latency-bytes (`scale-model switch`).
            t = model.Tuning(latency_bytes=int(switch.fabric_latency_bytes(fname, base)))
            alpha = fabrics.FABRICS[fname][1]
            one = workload.step_times(p, t, layers, 1, a.ranks, rate)['t_step']
            series = []
            for n in nodes_list:
                step = workload.step_times(p, t, layers, n, a.ranks, rate)['t_step']
                flat = compute_ms / 1e3 + model.ring_flat_time(
                    alpha, 1 / (fabrics.FABRICS[fname][2] * rate), grad, n * a.ranks)
                parts = model.allreduce_parts(p, t, grad, n, a.ranks, rate)
                what_if = workload.step_times(p, dataclasses.replace(t, halving=True), layers,
                                              n, a.ranks, rate)['t_step']
                series.append({'nodes': n, 't_step': step, 'efficiency': one / step,
                               'halving_step': what_if,
                               'halving_compute_efficiency': compute_ms / 1e3 / what_if,
                               'compute_efficiency': compute_ms / 1e3 / step,
                               'flat_ring_step': flat, 'flat_ring_efficiency':
                               (compute_ms / 1e3) / flat if flat else 1.0,
                               'limit': max(('latency', 'wire', 'round', 'local'),
                                            key=lambda k: parts[k])})
            out['fabrics'].setdefault(fname, {})[wname] = series
    with open(os.path.join(a.out_dir, 'scale-projection.json'), 'w') as f:
        json.dump(out, f, indent=1)
    plots.projection(out, a.out_dir)
    for fname, per in out['fabrics'].items():
        for wname, series in per.items():
            below = next((s['nodes'] for s in series if s['efficiency'] < 0.9), None)
            print(f"{fname:>7} {wname:>10}: compute / step at 1, 256, 4096 nodes "
                  f"{series[0]['compute_efficiency']:.2f} {series[8]['compute_efficiency']:.2f} "
                  f"{series[-1]['compute_efficiency']:.2f} (flat ring "
                  f"{series[0]['flat_ring_efficiency']:.2f} "
                  f"{series[8]['flat_ring_efficiency']:.2f} "
                  f"{series[-1]['flat_ring_efficiency']:.2f}; halving-doubling at 4096 "
                  f"{series[-1]['halving_compute_efficiency']:.2f}); against its own one node "
                  f"{series[-1]['efficiency']:.2f} at 4096, below 0.9 from {below or '-'} nodes; "
                  f"largest term at 4096: {series[-1]['limit']}")
    return 0


def add_statistic(parser):
    parser.add_argument('--statistic', default='median', choices=list(measure.STATISTICS),
                        help="what one operation took: the median of nodecomm-bench's timed "
                        "iterations (the typical operation, which a few descheduled ones on "
                        "a shared machine do not move; the default) or their mean (its "
                        "table's time)")
    parser.add_argument('--small-reps', type=int, default=measure.SMALL_REPS,
                        help='steady launches per run for sizes below 256K, whose median is '
                        "the run's time (each run of the others is one launch)")


def parser():
    ap = argparse.ArgumentParser(prog='scale-model', description=__doc__)
    ap.add_argument('--build', default='build', help='build tree (its bin/ programs)')
    sub = ap.add_subparsers(dest='cmd', required=True)
    c = sub.add_parser('calibrate', help='measure on this machine and fit the parameters')
    c.add_argument('--rate', default='1gbit')
    c.add_argument('--out', default='', help='write params and points as JSON here')
    c.add_argument('--points', default='', help='fit these recorded points instead of measuring')
    c.add_argument('--reps', type=int, default=3, help='runs per layout; their median counts')
    c.add_argument('--compress', default='', choices=['', 'bf16', 'f16', 'int8'],
                   help="measure 2 x 1 allreduces of 1-64 MiB with this wire type instead "
                   "(with --base and --fit codec, or codec_int8 for int8: that wire type's "
                   "codec cost)")
    c.add_argument('--base', default='', help='start from these params (a calibration JSON)')
    c.add_argument('--fit', default='', help='fit only these parameters (comma-separated)')
    add_statistic(c)
    c.add_argument('--timeout', type=int, default=600)
    c.set_defaults(func=cmd_calibrate)
    p = sub.add_parser('predict', help='predicted times, JSON')
    p.add_argument('--params', required=True)
    p.add_argument('--nodes', type=lambda s: [int(x) for x in s.split(',')], default=[2])
    p.add_argument('--ranks', type=lambda s: [int(x) for x in s.split(',')], default=[1])
    p.add_argument('--rate', default='1gbit')
    p.add_argument('--sizes', type=parse_sizes, default=CHECK_SIZES)
    p.add_argument('--workload', action='append', help='NAME[:SCALE]')
    p.add_argument('--op', default='allreduce',
                   choices=['allreduce', 'reduce_scatter', 'allgather', 'broadcast', 'reduce'])
    p.add_argument('--compress', default='none', choices=list(model.WIRE_FACTOR),
                   help="allreduce's wire type (nodecomm-bench --compress)")
    p.set_defaults(func=cmd_predict)
    k = sub.add_parser('check', help='predict, measure, and print the error table')
    k.add_argument('--params', default='', help='predict with this calibration (JSON)')
    k.add_argument('--calibrate', default='', metavar='OUT',
                   help='calibrate first, in this sitting, write it to OUT and predict with it '
                   '(instead of --params)')
    k.add_argument('--calibrate-rate', default='1gbit', help='the rate --calibrate measures at')
    k.add_argument('--nodes', type=lambda s: [int(x) for x in s.split(',')],
                   default=[2, 3, 4, 6, 8])
    k.add_argument('--ranks', type=lambda s: [int(x) for x in s.split(',')], default=[1, 2])
    k.add_argument('--rates', type=lambda s: s.split(','), default=['1gbit', '500mbit'])
    k.add_argument('--sizes', type=parse_sizes, default=CHECK_SIZES)
    k.add_argument('--workloads', type=lambda s: [w for w in s.split(',') if w],
                   default=list(WORKLOADS))
    k.add_argument('--ops', type=lambda s: [o for o in s.split(',') if o], default=['allreduce'],
                   help='collectives to measure: allreduce, reduce_scatter, allgather, '
                   'broadcast, reduce')
    k.add_argument('--compress', type=lambda s: [c for c in s.split(',') if c], default=[],
                   help='also allreduce with these wire types (bf16, f16, int8)')
    k.add_argument('--reps', type=int, default=3, help='runs per layout; their median counts')
    k.add_argument('--out', default='')
    k.add_argument('--replay', default='',
                   help="predict earlier checks' measurements (their --out files, comma-separated) "
                   "instead of measuring")
    k.add_argument('--markdown', action='store_true', help='also print the error table as '
                   'Markdown (docs/SCALING.md)')
    add_statistic(k)
    k.add_argument('--timeout', type=int, default=900)
    k.set_defaults(func=cmd_check)
    j = sub.add_parser('project', help='step time and scaling efficiency to many nodes')
    j.add_argument('--params', required=True)
    j.add_argument('--fabrics', type=lambda s: s.split(','), default=list(fabrics.FABRICS))
    j.add_argument('--workloads', type=lambda s: [(w.split(':')[0], float(w.split(':')[1]))
                                                  for w in s.split(',')],
                   default=list(switch.STEP_WORKLOADS),
                   help='NAME:COMPUTE_MS per step,... (default: docs/SCALING.md, "Workloads")')
    j.add_argument('--ranks', type=int, default=8, help='ranks (accelerators) per node')
    j.add_argument('--max-nodes', type=int, default=4096)
    j.add_argument('--out-dir', default='.')
    j.set_defaults(func=cmd_project)
    w = sub.add_parser('switch', help="the recursive-doubling/ring switch: the model's, "
                       "the fabrics' latency-bytes, and measured on this machine")
    w.add_argument('--params', default='', help='calibration: this machine and the fabrics')
    w.add_argument('--table', default='', help='write the shared switch table here')
    w.add_argument('--measure', action='store_true', help='run rd and ring side by side')
    w.add_argument('--steps', action='store_true',
                   help="step time per cap on auto's switch, and what holding for urgent "
                   "operations costs a step per node count (the fabrics, 8 ranks per node)")
    w.add_argument('--nodes', type=lambda s: [int(x) for x in s.split(',')], default=[4, 8])
    w.add_argument('--ranks', type=int, default=1)
    w.add_argument('--rate', default='1gbit')
    w.add_argument('--sizes', type=parse_sizes,
                   default=parse_sizes('4K,8K,16K,32K,64K,128K,256K,512K'))
    w.add_argument('--reps', type=int, default=3)
    w.add_argument('--out', default='')
    w.add_argument('--timeout', type=int, default=600)
    w.set_defaults(func=lambda a: switch.cmd_switch(a, load_params))
    s = sub.add_parser('chunks', help="the ring's slice size (--chunk-size): measured side "
                       "by side on this machine, against the model (which has no slice term)")
    s.add_argument('--params', default='', help='calibration: also print the prediction')
    s.add_argument('--nodes', type=lambda s: [int(x) for x in s.split(',')], default=[2, 4])
    s.add_argument('--ranks', type=lambda s: [int(x) for x in s.split(',')], default=[1])
    s.add_argument('--rate', default='1gbit')
    s.add_argument('--sizes', type=parse_sizes, default=parse_sizes('4M,64M'))
    s.add_argument('--chunks', type=parse_sizes, default=parse_sizes('16K,512K,8M'),
                   help="slice sizes to run (the daemon's default is always added)")
    s.add_argument('--reps', type=int, default=3)
    s.add_argument('--daemon-arg', action='append', default=[],
                   help="a daemon option for every run (e.g. --priority-policy=none: "
                   "sequence order, where the ring gets whole operations and the slice size "
                   "binds)")
    s.add_argument('--tolerance', type=float, default=0.05,
                   help="largest loss of the default against the best slice size")
    s.add_argument('--out', default='')
    s.add_argument('--timeout', type=int, default=600)
    s.set_defaults(func=lambda a: chunks.cmd_chunks(a, load_params))
    return ap


def main(argv=None):
    a = parser().parse_args(argv)
    return a.func(a)


if __name__ == '__main__':
    sys.exit(main())
