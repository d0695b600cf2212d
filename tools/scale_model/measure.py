"""Runs nodecomm-bench on simulated clusters (nodecomm-launch, --netsim) and returns its
records, for calibration and checking."""
import json
import os
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


class Runner:
    def __init__(self, build, timeout=600, verbose=True, statistic='mean'):
        self.launch = os.path.join(build, 'bin', 'nodecomm-launch')
        self.bench = os.path.join(build, 'bin', 'nodecomm-bench')
        self.timeout = timeout
        self.verbose = verbose
        self.key = STATISTICS[statistic]

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

    def allreduce(self, nodes, ranks, rate, sizes, iters=None, daemon_args=(), compress='none'):
        """[(size, seconds per allreduce)] on nodes x ranks."""
        args = ['--op', 'allreduce', '--sizes', ','.join(str(s) for s in sizes)]
        if compress != 'none':
            args += ['--compress', compress]
        if iters:
            args += ['--iters', str(iters)]
        return [(r['size'], r[self.key] / 1e6)
                for r in self._run(nodes, ranks, rate, args, daemon_args)]

    def collective(self, nodes, ranks, rate, op, sizes, compress='none'):
        """[(size, seconds per operation)]: `size` the whole vector, as nodecomm-bench's."""
        if op == 'allreduce':
            return self.allreduce(nodes, ranks, rate, sizes, compress=compress)
        args = ['--op', op, '--sizes', ','.join(str(s) for s in sizes)]
        return [(r['size'], r[self.key] / 1e6) for r in self._run(nodes, ranks, rate, args)]

    def workload(self, nodes, ranks, rate, workload, scale, steps=3):
        args = ['--workload', workload, '--scale', repr(scale), '--steps', str(steps),
                '--warmup', '1']
        rec = self._run(nodes, ranks, rate, args)[-1]
        return {k: rec[k] / 1e3 for k in ('t_compute', 't_comm', 't_step')}
