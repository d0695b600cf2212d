"""The ring's slice size (issue 20, item 4), checked against the model: the model has no
slice term (the ring's slices pipeline, so only the first slice's way around would show, and
the scheduler already cuts a large allreduce into units of a quarter of its window: on a
1 Gbit/s link a unit's block per node is about 62-125 KiB at any node count, so a larger
--chunk-size does not cut it at all), so it predicts the same time for every --chunk-size.
`chunks` measures that on this machine: the allreduce under each slice size, side by side,
and how much the daemon's default loses against the best one."""
import json
import statistics

from . import measure, model

KIB = model.KIB


def label(size):
    return f"{size // model.MIB}M" if size % model.MIB == 0 else f"{size // KIB}K"


def sweep(runner, nodes, ranks, rate, sizes, chunks, reps, daemon_args=()):
    """{chunk: [seconds per size]}: medians of `reps` runs, the chunk sizes alternating within
    each repetition so that the machine's drift spreads over all of them."""
    runs = {c: [] for c in chunks}
    for _ in range(reps):
        for c in chunks:
            runs[c].append(runner.allreduce(nodes, ranks, rate, sizes,
                                            daemon_args=[*daemon_args, f'--chunk-size={c}']))
    return {c: [statistics.median(run[i][1] for run in runs[c]) for i in range(len(sizes))]
            for c in chunks}


def losses(times, default):
    """Per size: how much slower the default chunk is than the fastest one (0: it is the
    fastest), and the spread between the slowest and the fastest."""
    out = []
    for i in range(len(next(iter(times.values())))):
        column = {c: t[i] for c, t in times.items()}
        best = min(column.values())
        out.append({'default_loss': column[default] / best - 1,
                    'spread': max(column.values()) / best - 1,
                    'best_chunk': min(column, key=column.get)})
    return out


def cmd_chunks(a, load_params):
    default = model.Tuning().slice_bytes
    chunks = sorted(set(a.chunks) | {default})
    sizes = a.sizes
    params = load_params(a.params) if a.params else None
    rb = measure.rate_bytes(a.rate)
    runner = measure.Runner(a.build, timeout=a.timeout)
    rows, worst = [], 0.0
    for nodes in a.nodes:
        for ranks in a.ranks:
            times = sweep(runner, nodes, ranks, a.rate, sizes, chunks, a.reps, a.daemon_arg)
            for i, (size, loss) in enumerate(zip(sizes, losses(times, default))):
                row = {'nodes': nodes, 'ranks': ranks, 'rate': a.rate, 'size': size,
                       'daemon_args': a.daemon_arg,
                       'times_s': {label(c): times[c][i] for c in chunks}, **loss}
                if params:
                    row['predicted_s'] = model.allreduce_time(params, model.Tuning(), size,
                                                              nodes, ranks, rb)
                rows.append(row)
                worst = max(worst, loss['default_loss'])
                predicted = (f"; model {row['predicted_s'] * 1e3:.1f} ms"
                             if 'predicted_s' in row else '')
                print(f"{nodes}x{ranks} {label(size):>4}: " +
                      ' '.join(f"{label(c)} {times[c][i] * 1e3:.1f}" for c in chunks) +
                      f" ms; default {label(default)} +{100 * loss['default_loss']:.1f} % "
                      f"against {label(loss['best_chunk'])}, spread "
                      f"{100 * loss['spread']:.1f} %{predicted}", flush=True)
    ok = worst <= a.tolerance
    print(f"# the default --chunk-size {label(default)}: at most {100 * worst:.1f} % slower "
          f"than the best slice size (tolerance {100 * a.tolerance:.0f} %): "
          f"{'within' if ok else 'NOT within'}")
    if a.out:
        with open(a.out, 'w') as f:
            json.dump({'default_chunk': default, 'chunks': chunks, 'rows': rows,
                       'worst_default_loss': worst, 'within': ok}, f, indent=1)
    return 0 if ok else 1
