#!/usr/bin/python3
"""Data-parallel training with PyTorch DistributedDataParallel, gradients averaged by nodecommd.

    nodecomm-launch --nodes 2 --ranks-per-node 2 -- /usr/bin/python3 examples/pytorch_ddp.py
    nodecomm-launch --nodes 2 --ranks-per-node 2 -- /usr/bin/python3 examples/pytorch_ddp.py \
        --backend nodecomm                                 # plain DDP on the nodecomm backend
    nodecomm-launch --nodes 2 --ranks-per-node 2 -- /usr/bin/python3 examples/pytorch_ddp.py \
        --reference gloo                                   # DDP's own gloo allreduce instead

Three ways to nodecommd: the communication hook on a gloo process group (the default: gloo
only carries DDP's setup traffic), plain DDP on the "nodecomm" torch.distributed backend
(--backend nodecomm: no hook at all), or the hook on the nodecomm backend (--backend nodecomm
--hook).

Trains an MLP (10.5M parameters by default) on seeded synthetic data for --steps steps and
prints, on rank 0, each step's time and loss and a summary line (mean step time without the
first --warmup steps). Both modes see the same seeds, so their final weights agree
(--save FILE writes rank 0's state_dict; tests/python compares them).

Under `nodecomm-launch --netsim RATE` each node is a network namespace behind a shaped link,
but the ranks themselves run in the launcher's namespace and talk to their daemon over a Unix
socket. So that the gloo reference crosses the same shaped link, each of its ranks first
enters its node's namespace (/run/netns/nc<launcher pid>h<node>; needs root, as --netsim
does) and gloo binds to that namespace's eth0.

Needs PYTHONPATH to hold the nodecomm package (build/python after a build), unless installed.
"""

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

import nodecomm
import nodecomm.torch

CLONE_NEWNET = 0x40000000


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--warmup", type=int, default=2,
                   help="first steps left out of the summary's mean (default 2)")
    p.add_argument("--seed", type=int, default=1234, help="model and data seed (default 1234)")
    p.add_argument("--reference", choices=["gloo", "none"],
                   help="gloo: DDP's default allreduce over gloo instead of the nodecomm hook; "
                        "none: no gradient exchange at all (a hook that returns each bucket "
                        "as is), the compute-only floor of the step time")
    p.add_argument("--backend", choices=["gloo", "nodecomm"], default="gloo",
                   help="torch.distributed backend of the process group. gloo (default): DDP's "
                        "setup traffic only, gradients through the nodecomm hook; nodecomm: "
                        "the nodecomm backend carries everything, plain DDP with no hook "
                        "(--hook adds the hook on top)")
    p.add_argument("--hook", action="store_true",
                   help="with --backend nodecomm: register the nodecomm hook anyway")
    p.add_argument("--store", help="file for the torch.distributed file:// rendezvous "
                                   "(default: a fresh /tmp file that rank 0 picks)")
    p.add_argument("--save", help="rank 0 writes the final state_dict here (torch.save)")
    p.add_argument("--compress", choices=["none", "bf16", "f16", "int8"], default="none",
                   help="nodecomm wire compression between nodes (default none); with "
                        "--backend nodecomm and no hook: bf16 or f16 (the backend's Options)")
    p.add_argument("--gloo-compress", choices=["none", "fp16"], default="none",
                   help="with --reference gloo: torch's own fp16_compress_hook, so gloo moves "
                        "2-byte gradients too: the like-for-like reference for --compress bf16 "
                        "(torch's bf16_compress_hook needs CUDA and NCCL) (default none)")
    p.add_argument("--piece-mb", type=float, default=4,
                   help="nodecomm hook: post each bucket as pieces of at most this many MB "
                        "(HookState piece_mb; 0: whole buckets; default 4)")
    p.add_argument("--no-register", action="store_true",
                   help="nodecomm hook: stage buckets in the arena instead of registering DDP's "
                        "bucket memory with the daemon (HookState register=False)")
    p.add_argument("--priority", type=int, default=0, help="base priority of the buckets")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads per rank (default 1: ranks share few cores)")
    p.add_argument("--batch", type=int, default=16, help="samples per rank per step")
    p.add_argument("--input", type=int, default=1024, help="input features")
    p.add_argument("--hidden", type=int, default=2048, help="hidden layer width")
    p.add_argument("--layers", type=int, default=3, help="hidden layers")
    p.add_argument("--classes", type=int, default=10, help="output classes")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate")
    p.add_argument("--bucket-cap-mb", type=float, default=25, help="DDP bucket size (MB)")
    p.add_argument("--quiet", action="store_true", help="print only the summary line")
    p.add_argument("--phases", action="store_true",
                   help="rank 0 prints each step's forward, backward (with DDP's wait for the "
                        "buckets) and optimizer times")
    p.add_argument("--bucket-times", action="store_true",
                   help="every rank prints, per step, when each DDP bucket reached the comm "
                        "hook and when its reduction completed, in ms since the rank's step "
                        "began (the hook modes and --reference none; gloo and plain "
                        "--backend nodecomm have no Python hook to time)")
    return p.parse_args()


def make_model(args):
    layers, width = [], args.input
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.hidden), nn.ReLU()]
        width = args.hidden
    layers.append(nn.Linear(width, args.classes))
    return nn.Sequential(*layers)


def make_batches(args, rank):
    """Every rank's batches for every step, from seeds alone: a fixed random 'teacher'
    projection labels Gaussian inputs, so the loss has something to learn."""
    teacher = torch.Generator().manual_seed(args.seed)
    projection = torch.randn(args.input, args.classes, generator=teacher)
    data = torch.Generator().manual_seed(args.seed * 1000 + rank + 1)
    batches = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.input, generator=data)
        batches.append((x, (x @ projection).argmax(dim=1)))
    return batches


def node_namespace():
    """Name of this rank's node namespace under nodecomm-launch --netsim, else None."""
    job = os.environ.get("NODECOMM_JOB", "")
    node = os.environ.get("NODECOMM_NODE")
    if not os.environ.get("NODECOMM_LINK_RATE"):
        return None
    if not job.startswith("launch-") or node is None:
        sys.exit(f"pytorch_ddp: --netsim, but NODECOMM_JOB={job!r} NODECOMM_NODE={node!r} do "
                 "not name a nodecomm-launch node namespace")
    return f"nc{job[len('launch-'):]}h{node}"


def link_tx_bytes():
    """Bytes this node has sent over its simulated link (eth0 of its namespace), or None
    without --netsim: shows what each mode really puts on the wire."""
    namespace = node_namespace()
    ip = shutil.which("ip") or shutil.which("/usr/sbin/ip") or shutil.which("/sbin/ip")
    if namespace is None or ip is None:
        return None
    try:
        out = subprocess.run([ip, "-n", namespace, "-j", "-s", "link", "show", "dev", "eth0"],
                             capture_output=True, text=True, check=True, timeout=10).stdout
        return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError):
        return None


def enter_node_namespace():
    """Under --netsim, moves the calling (main) thread into its node's network namespace.
    Network namespaces are per thread: gloo's sockets, made by this thread and the threads
    it starts from now on, then use the node's eth0 and the shaped link. Returns the
    interface for GLOO_SOCKET_IFNAME."""
    namespace = node_namespace()
    if namespace is None:
        return "lo"
    path = f"/run/netns/{namespace}"
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            sys.exit(f"pytorch_ddp: setns({path}): {os.strerror(err)} (needs root)")
    finally:
        os.close(fd)
    return "eth0"


def no_exchange_hook(_, bucket):
    """--reference none: every rank keeps its own gradients (timing only)."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


class BucketTimes:
    """--bucket-times: wraps a comm hook and notes, relative to the step's start, when each
    bucket reached it ("posted") and when its future completed ("done"): where in the step the
    wire can start, and how long each bucket's reduction took."""

    def __init__(self):
        self.step_start = 0.0
        self.events = []  # (bucket index, bytes or None when done, seconds since step start)

    def start_step(self):
        self.step_start = time.perf_counter()
        self.events = []

    def wrap(self, hook):
        """A plain function, as DDP's register_comm_hook wants (it reads its name)."""
        def timed_hook(state, bucket):
            buffer = bucket.buffer()
            index = bucket.index()
            self.events.append((index, buffer.numel() * buffer.element_size(),
                                time.perf_counter() - self.step_start))

            def done(future):
                self.events.append((index, None, time.perf_counter() - self.step_start))
                return future.value()
            return hook(state, bucket).then(done)
        return timed_hook

    def line(self, rank, step):
        parts = [f"{i}:posted:{b / 1e6:.1f}MB@{t * 1e3:.1f}" if b is not None
                 else f"{i}:done@{t * 1e3:.1f}" for i, b, t in self.events]
        return f"buckets: rank {rank} step {step} " + " ".join(parts)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = make_model(args)
    n_params = sum(p.numel() for p in model.parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    # The hook stages every bucket in the arena: room for all gradients, plus slack.
    arena = None if os.environ.get("NODECOMM_ARENA_BYTES") else 2 * param_bytes + (64 << 20)
    nodecomm.init(arena_bytes=arena)
    rank, size = nodecomm.world_rank(), nodecomm.world_size()
    store = args.store or nodecomm.torch.rendezvous_file(args.reference or "nodecomm-ddp")

    backend_alone = args.backend == "nodecomm" and not args.hook and not args.reference
    if args.reference == "gloo":
        if args.backend != "gloo":
            sys.exit("pytorch_ddp: --reference gloo is the gloo backend (drop --backend)")
        # The whole gradient traffic goes through gloo: it must cross the (simulated) network.
        os.environ["GLOO_SOCKET_IFNAME"] = enter_node_namespace()
        nodecomm.torch.init_process_group("gloo", path=store)
    elif args.backend == "nodecomm":
        # Everything through the daemon. Only the rendezvous store is TCP-free (a file).
        options = nodecomm.torch.Options(
            compress=args.compress if backend_alone and args.compress != "none" else None)
        nodecomm.torch.init_process_group("nodecomm", path=store, pg_options=options)
    else:
        # Only DDP's setup traffic uses this group; it stays on this machine's loopback.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        nodecomm.torch.init_process_group("gloo", path=store)

    # Gradients as views of the buckets: DDP skips copying them in (for every mode alike).
    ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                  gradient_as_bucket_view=True)
    mode = args.reference or "nodecomm"
    if args.reference == "gloo" and args.gloo_compress != "none":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = getattr(default_hooks, f"{args.gloo_compress}_compress_hook")
        ddp.register_comm_hook(None, hook)  # None: the default (gloo) process group
        mode += f"+{args.gloo_compress}"
    timer = None
    if args.reference == "none":
        timer = BucketTimes() if args.bucket_times else None
        ddp.register_comm_hook(None, timer.wrap(no_exchange_hook) if timer else no_exchange_hook)
    elif backend_alone:
        mode = "nodecomm-backend" + (f"+{args.compress}" if args.compress != "none" else "")
    elif not args.reference:
        state = nodecomm.torch.HookState(priority=args.priority, piece_mb=args.piece_mb,
                                         register=not args.no_register,
                                         compress=None if args.compress == "none"
                                         else args.compress)
        hook = nodecomm.torch.allreduce_hook
        timer = BucketTimes() if args.bucket_times else None
        ddp.register_comm_hook(state, timer.wrap(hook) if timer else hook)
        if args.backend == "nodecomm":
            mode = "nodecomm-backend+hook"
        if args.compress != "none":
            mode += f"+{args.compress}"

    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    batches = make_batches(args, rank)
    if rank == 0 and not args.quiet:
        print(f"pytorch_ddp: {mode}, {size} ranks, {n_params / 1e6:.1f}M parameters, "
              f"batch {args.batch}/rank, {args.threads} thread(s)/rank, "
              f"link {os.environ.get('NODECOMM_LINK_RATE', 'unshaped')}", flush=True)

    step_times = []
    tx_start = None
    for step, (x, y) in enumerate(batches):
        if rank == 0 and step == min(args.warmup, args.steps - 1):
            tx_start = link_tx_bytes()
        if timer:
            timer.start_step()
        start = time.perf_counter()
        start_wall = time.time()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        forward_end = time.perf_counter()
        loss.backward()  # DDP waits for every bucket's reduction before this returns
        backward_end = time.perf_counter()
        optimizer.step()
        elapsed = time.perf_counter() - start
        step_times.append(elapsed)
        if rank == 0 and args.phases:
            print(f"phases: t0 {start_wall:.4f} step {step} forward_ms {(forward_end - start) * 1e3:.1f} "
                  f"backward_ms {(backward_end - forward_end) * 1e3:.1f} "
                  f"optimizer_ms {(start + elapsed - backward_end) * 1e3:.1f}", flush=True)
        if timer:
            # One write per line, newline included: four ranks share the launcher's output.
            sys.stdout.flush()
            os.write(sys.stdout.fileno(), (timer.line(rank, step) + "\n").encode())
        if rank == 0 and not args.quiet:
            print(f"step {step:3d}  time {elapsed * 1e3:8.1f} ms  loss {loss.item():.6f}",
                  flush=True)

    measured = step_times[args.warmup:] or step_times
    if rank == 0:
        tx_end = link_tx_bytes()
        link = ""
        if tx_start is not None and tx_end is not None:
            link = f" node0_link_tx_mb_per_step={(tx_end - tx_start) / len(measured) / 1e6:.1f}"
        print(f"summary: mode={mode} ranks={size} params={n_params} steps={len(step_times)} "
              f"warmup={args.warmup} mean_step_ms={statistics.mean(measured) * 1e3:.1f} "
              f"median_step_ms={statistics.median(measured) * 1e3:.1f} "
              f"final_loss={loss.item():.6f}{link}", flush=True)
        if args.save:
            torch.save(ddp.module.state_dict(), args.save)
    dist.destroy_process_group()
    nodecomm.finalize()


if __name__ == "__main__":
    main()
