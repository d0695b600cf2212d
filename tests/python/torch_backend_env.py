"""One rank of a job started the way torchrun starts it (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT, TORCHELASTIC_RUN_ID; no NODECOMM_* but the
daemon's runtime directory): dist.init_process_group("nodecomm") must map them to nodecomm's
and reduce correctly. Run by torch_backend_env.sh."""
import os
import sys

import torch
import torch.distributed as dist

import nodecomm
import nodecomm.torch

if not nodecomm.torch.backend_available():
    print(f"skip: the nodecomm torch backend is not built: "
          f"{nodecomm.torch.backend_unavailable_reason()}")
    sys.exit(77)
dist.init_process_group("nodecomm")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
ok = (t.tolist() == [size * (size + 1) / 2] * 5 and nodecomm.world_rank() == rank
      and os.environ.get("NODECOMM_JOB") == os.environ["TORCHELASTIC_RUN_ID"])
print(f"{'ok' if ok else 'FAIL'}: rank {rank}/{size}, nodecomm rank {nodecomm.world_rank()}, "
      f"job {os.environ.get('NODECOMM_JOB')}, sum {t.tolist()}", flush=True)
dist.barrier()
nodecomm.finalize()
sys.exit(0 if ok else 1)
