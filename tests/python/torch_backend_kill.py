"""A rank killed mid-training (plain DDP on the nodecomm backend): every other rank's backward
must raise a RuntimeError that names the dead rank within 5 s of the kill. Run under
nodecomm-launch by torch_backend_kill.sh, which checks the survivors' "ok:" lines.
    torch_backend_kill.py DIR    (DIR: where the victim writes the time of its death)"""

import os
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel
except ImportError as e:
    print(f"skip: torch is not installed for {sys.executable}: {e}")
    sys.exit(77)

import nodecomm.torch as nct

if not nct.backend_available():
    print(f"skip: the nodecomm torch backend is not built: {nct.backend_unavailable_reason()}")
    sys.exit(77)

KILL_STEP = 3
torch.set_num_threads(1)
dist.init_process_group("nodecomm")
rank, size = dist.get_rank(), dist.get_world_size()
victim = size - 1
torch.manual_seed(1)
model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 8)),
                                bucket_cap_mb=1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
stamp = os.path.join(sys.argv[1], "killed_at")
for step in range(1000):
    if rank == victim and step == KILL_STEP:
        with open(stamp + ".tmp", "w") as f:
            f.write(repr(time.time()))
        os.rename(stamp + ".tmp", stamp)
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(16, 256)
    try:
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    except RuntimeError as e:
        raised = time.time()
        try:
            killed = float(open(stamp).read())
        except OSError:
            print(f"FAIL: rank {rank} raised at step {step} before rank {victim} died: {e}")
            os._exit(1)
        delay = raised - killed
        text = str(e)
        named = f"rank {victim}" in text
        verdict = "ok" if named and delay < 5 else "FAIL"
        print(f"{verdict}: rank {rank} raised {delay:.2f} s after rank {victim} was killed "
              f"(step {step}){'' if named else ' without naming it'}: {text[:300]}", flush=True)
        os._exit(0 if verdict == "ok" else 1)
    time.sleep(0.01)
print(f"FAIL: rank {rank} trained 1000 steps without noticing rank {victim}'s death", flush=True)
os._exit(1)
