"""Plots with gnuplot (SVG), from the projection's JSON."""
import os
import shutil
import subprocess


def projection(out, out_dir):
    """One plot per workload: scaling efficiency against nodes, every fabric, nodecomm and a
    flat ring over every process. Skipped (with a note) without gnuplot."""
    gnuplot = shutil.which('gnuplot')
    if gnuplot is None:
        print('# gnuplot is missing (apt-get install gnuplot-nox): no plots')
        return []
    made = []
    for wname in out['workloads']:
        data = os.path.join(out_dir, f'scaling-{wname}.dat')
        fabrics = list(out['fabrics'])
        with open(data, 'w') as f:
            for fname in fabrics:
                f.write(f'# {fname}: nodes compute_efficiency flat_ring_efficiency '
                        f'halving_compute_efficiency\n')
                for s in out['fabrics'][fname][wname]:
                    f.write(f"{s['nodes']} {s['compute_efficiency']:.5f} "
                            f"{s['flat_ring_efficiency']:.5f} "
                            f"{s['halving_compute_efficiency']:.5f}\n")
                f.write('\n\n')
        svg = os.path.join(out_dir, f'scaling-{wname}.svg')
        plot = []
        for i, fname in enumerate(fabrics):
            plot.append(f"'{data}' index {i} using 1:2 with linespoints lw 2 lc {i + 1} "
                        f"title '{fname} nodecomm'")
            plot.append(f"'{data}' index {i} using 1:3 with lines dt 2 lc {i + 1} "
                        f"title '{fname} flat ring'")
            plot.append(f"'{data}' index {i} using 1:4 with lines dt 3 lc {i + 1} "
                        f"title '{fname} halving-doubling (what if)'")
        script = f"""set terminal svg size 800,480 dynamic font 'sans,12'
set output '{svg}'
set logscale x 2
set xlabel 'nodes'
set ylabel 'compute / step time'
set yrange [0:1.05]
set key outside right
set grid
set title '{wname}: projected compute / step (8 ranks per node)'
plot {', '.join(plot)}
"""
        subprocess.run([gnuplot], input=script, text=True, check=True, timeout=60)
        os.remove(data)
        made.append(svg)
    return made
