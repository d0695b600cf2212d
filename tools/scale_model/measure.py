"""Runs nodecomm-bench on simulated clusters (nodecomm-launch, --netsim) and returns its
records, for calibration and checking."""
import json
import os
import statistics
import subprocess
import tempfile

RATES = {'gbit': 1e9 / 8, 'mbit': 1e6 / 8, 'kbit': 1e3 / 8}


def rate_bytes(text):
    """'1gbit' -> 125e6 bytes per second; None for 'none' (unshaped)."""
    if text in (None, '', 'none'):
        return None
    for unit, factor in RATES.items():
        if text.endswith(unit):
            return float(text[:-len(unit)]) * factor
    raise ValueError(f"rate {text}: give it as NUMBER gbit|mbit|kbit")


# What one operation took, from nodecomm-bench's records: the mean of the timed iterations
# (time_us), or their median (median_us), which a few descheduled iterations on a shared
# machine do not move.
STATISTICS = {'mean': 'time_us', 'median': 'median_us'}


# Operations below STEADY_BYTES run STEADY_ITERS timed iterations after STEADY_WARMUP, in a
# launch of their own: nodecomm-bench's default 20 after 5 leave the simulated link's token
# bucket (256 KiB) partly full, so a 16 KiB allreduce on 2 nodes timed 80 us where the link
# allows 131 (steady: 141), a 64 KiB one on 3 nodes 430 us where it takes 747, and too few
# iterations for a stable median of a small operation on 2 shared cores.
STEADY_BYTES = 256 * 1024
STEADY_ITERS = 300
STEADY_WARMUP = 60
# Even so, a steady launch's median of a small operation moves by 20-40 % from one launch to
# the next (8 B on 8 x 1 nodes: 351-652 us over 16 launches in 10 minutes; pinning each
# simulated node to a core did not narrow it): where 16 processes share 2 cores, which of them
# runs when decides. Such launches take seconds, so each measurement of the small sizes is the
# median of SMALL_REPS of them.
SMALL_REPS = 3


def cpu_jiffies(path='/proc/stat'):
    """(steal, total) jiffies of all CPUs so far, or None where the file is not there: the time
    the hypervisor ran something else while this VM had work (the 8th value of the cpu line)."""
    try:
        with open(path) as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # guest and guest_nice (9th, 10th) are already counted in user and nice.
    return (values[7] if len(values) > 7 else 0), sum(values[:8])


def steal_fraction(before, after):
    """The share of the CPUs' time stolen by the hypervisor between two cpu_jiffies()."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def with_steal(call):
    """(call(), the host's steal while it ran: steal_fraction)."""
    before = cpu_jiffies()
    result = call()
    return result, steal_fraction(before, cpu_jiffies())


class Runner:
    def __init__(self, build, timeout=600, verbose=True, statistic='median',
                 small_reps=SMALL_REPS):
        self.launch = os.path.join(build, 'bin', 'nodecomm-launch')
        self.bench = os.path.join(build, 'bin', 'nodecomm-bench')
        self.timeout = timeout
        self.verbose = verbose
        self.key = STATISTICS[statistic]
        self.small_reps = small_reps
        # The last call's launches per size ({size: [seconds, ...]}), whose median it returned:
        # a check keeps them, to show how far one launch lies from the next.
        self.last_launches = {}

    def _run(self, nodes, ranks, rate, args, daemon_args=()):
        with tempfile.TemporaryDirectory(prefix='scale-model.') as tmp:
            out = os.path.join(tmp, 'records.json')
            cmd = [self.launch, '--timeout', str(self.timeout - 10), '--nodes', str(nodes),
                   '--ranks-per-node', str(ranks)]
            if rate not in (None, 'none'):
                cmd += ['--netsim', rate]
            cmd += [f'--daemon-arg={a}' for a in daemon_args]
            cmd += ['--', self.bench] + args + ['--json', out]
            if self.verbose:
                print('# ' + ' '.join(cmd), flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n"
                                   f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
            with open(out) as f:
                return [json.loads(line) for line in f if line.strip()]

    def _sized(self, nodes, ranks, rate, args, sizes, iters=None, daemon_args=(), reps=None):
        """[(size, seconds)] in the order of `sizes`: the small ones in `reps` (small_reps)
        steady launches (see STEADY_BYTES, SMALL_REPS) unless `iters` is given, the rest with
        the bench's default counts in one launch."""
        if iters:
            groups = [(sizes, ['--iters', str(iters)], 1)]
        else:
            groups = [([s for s in sizes if s < STEADY_BYTES],
                       ['--iters', str(STEADY_ITERS), '--warmup', str(STEADY_WARMUP)],
                       self.small_reps if reps is None else reps),
                      ([s for s in sizes if s >= STEADY_BYTES], [], 1)]
        self.last_launches = {}
        for group, counts, launches in groups:
            if not group:
                continue
            runs = {}
            for _ in range(launches):
                recs = self._run(nodes, ranks, rate,
                                 args + ['--sizes', ','.join(str(s) for s in group)] + counts,
                                 daemon_args)
                for r in recs:
                    runs.setdefault(r['size'], []).append(r[self.key] / 1e6)
            self.last_launches.update(runs)
        return [(s, statistics.median(self.last_launches[s])) for s in sizes]

    def allreduce(self, nodes, ranks, rate, sizes, iters=None, daemon_args=(), compress='none',
                  reps=None):
        """[(size, seconds per allreduce)] on nodes x ranks."""
        args = ['--op', 'allreduce']
        if compress != 'none':
            args += ['--compress', compress]
        return self._sized(nodes, ranks, rate, args, sizes, iters, daemon_args, reps)

    def collective(self, nodes, ranks, rate, op, sizes, compress='none', reps=None):
        """[(size, seconds per operation)]: `size` the whole vector, as nodecomm-bench's."""
        if op == 'allreduce':
            return self.allreduce(nodes, ranks, rate, sizes, compress=compress, reps=reps)
        return self._sized(nodes, ranks, rate, ['--op', op], sizes, reps=reps)

    def workload(self, nodes, ranks, rate, workload, scale, steps=3):
        args = ['--workload', workload, '--scale', repr(scale), '--steps', str(steps),
                '--warmup', '1']
        rec = self._run(nodes, ranks, rate, args)[-1]
        return {k: rec[k] / 1e3 for k in ('t_compute', 't_comm', 't_step')}


def interleaved_pass(runner, keys, sizes, launch):
    """One pass over `keys` (a check's layouts and paths, a calibration's layouts), each over
    `sizes`: `launch(key, sizes, reps)` measures one key like Runner.collective. The small sizes
    (below STEADY_BYTES) go in runner.small_reps rounds of one launch per key, the larger ones
    in one launch per key after them. A small operation's launches taken back to back agree
    with each other more than with launches minutes apart (the checks of 2026-12-06 and -07:
    the means of a point's 5 back-to-back launches varied by 0.07-0.12 in log time from pass
    to pass, where independent launches would give 0.05-0.06; spread over the pass, 0.059
    against 0.065), so each key's launches are spread over the pass. Returns {key: ([(size,
    seconds)] in the order of `sizes`, each small size the median of its launches; {size:
    [launch seconds]}; the host's steal over the key's launches, their mean, or None)}."""
    return interleaved_jobs(runner, [(keys, sizes, launch)])[0]


def interleaved_jobs(runner, jobs):
    """interleaved_pass over several (keys, sizes, launch) jobs at once: each round of small
    launches goes round every job's keys, then every job's large launches follow. check
    --calibrate measures the calibration's layouts and the check's this way, so both see the
    same minutes of the host's drift (2026-12-07 21:41: with the calibration's pass run before
    the check's, its small operations on 8 x 2 ran a third slower than the check's of the same
    layout minutes later). Returns one interleaved_pass result per job, in order."""
    launches = [{key: {} for key in keys} for keys, _, _ in jobs]
    steals = [{key: [] for key in keys} for keys, _, _ in jobs]

    def one(j, key, group, reps):
        runs, stolen = with_steal(lambda: jobs[j][2](key, group, reps))
        kept = getattr(runner, 'last_launches', {})
        for size, sec in runs:
            launches[j][key].setdefault(size, []).extend(kept.get(size, [sec]))
        if stolen is not None:
            steals[j][key].append(stolen)

    small = [[s for s in sizes if s < STEADY_BYTES] for _, sizes, _ in jobs]
    large = [[s for s in sizes if s >= STEADY_BYTES] for _, sizes, _ in jobs]
    for _ in range(getattr(runner, 'small_reps', 1)):
        for j, (keys, _, _) in enumerate(jobs):
            if small[j]:
                for key in keys:
                    one(j, key, small[j], 1)
    for j, (keys, _, _) in enumerate(jobs):
        if large[j]:
            for key in keys:
                one(j, key, large[j], None)
    return [{key: ([(s, statistics.median(launches[j][key][s])) for s in sizes],
                   launches[j][key], statistics.mean(steals[j][key]) if steals[j][key] else None)
             for key in keys} for j, (keys, sizes, _) in enumerate(jobs)]
