"""Network fabrics for projection: one-way small-message latency and line rate, from public
sources (docs/SCALING.md lists them). The latency is what one message step between two
daemons costs on that fabric (MPI over it, host to host), replacing the simulated cluster's;
eta is the share of line rate that large MPI transfers reach."""

FABRICS = {
    # name: (line rate in bytes/s, one-way MPI latency in s, eta, source)
    '10gbe': (10e9 / 8, 20e-6, 0.94,
              'TCP/IP over 10 GbE: ~20 us one-way MPI latency (OSU micro-benchmarks over TCP '
              'on 10 GbE report 15-25 us); ~9.4 Gbit/s goodput'),
    '25gbe': (25e9 / 8, 15e-6, 0.94,
              'TCP/IP over 25 GbE: ~15 us one-way; ~23.5 Gbit/s goodput'),
    '100gbe': (100e9 / 8, 10e-6, 0.90,
               'TCP/IP over 100 GbE: ~10 us one-way; ~90 Gbit/s with several streams'),
    'hpc100': (100e9 / 8, 1.2e-6, 0.97,
               '100 Gbit/s HPC fabric (InfiniBand EDR, Omni-Path): ~1.1-1.3 us one-way MPI '
               'latency, ~12.1 GB/s unidirectional bandwidth (vendor and OSU figures)'),
}
