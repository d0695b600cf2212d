"""Network fabrics for projection: one-way small-message MPI latency, line rate and the share
of it large transfers reach, from public sources (docs/SCALING.md, "Fabrics", gives them and
marks what is assumed). The latency replaces the simulated cluster's per message step."""

FABRICS = {
    # name: (line rate in bytes/s, one-way MPI latency in s, eta, source)
    '10gbe': (10e9 / 8, 21e-6, 0.95,
              'TCP over 10 GbE: 21 us end to end (Hurwitz and Feng, Hot Interconnects 2003); '
              'one MPI task reaches over 95 % of 10 Gbit/s (Scalable Logic, AWS enhanced '
              'networking, 2014)'),
    '25gbe': (25e9 / 8, 15e-6, 0.95,
              'TCP over 25 GbE: over 24 Gbit/s with several streams (iperf3 on AWS c5.18xlarge, '
              'open-mpi/ompi#6521); latency assumed between 10 GbE and 100 GbE figures'),
    '100gbe': (100e9 / 8, 10e-6, 0.92,
               'TCP over 100 GbE: about 10 us for 8-byte messages (UNM study with ConnectX-4 and '
               'Open MPI 1.10.3, as reported by naddod.com); 92 Gbit/s iperf3 on AWS '
               'p3dn.24xlarge (NVIDIA/nccl#209)'),
    'hpc100': (100e9 / 8, 1.0e-6, 0.97,
               '100 Gbit/s HPC fabric (InfiniBand EDR): about 1 us MPI latency '
               '(open-mpi/ompi#5808); bandwidth share assumed as for RDMA fabrics'),
}
