"""nodecomm for Python: collectives through the node's nodecommd, from numpy arrays and CPU
torch tensors.

    import nodecomm
    nodecomm.init()                                   # NODECOMM_* from nodecomm-launch
    grad = nodecomm.alloc_array(1 << 20, "float32")   # arena buffer: zero copy
    req = nodecomm.allreduce(grad, op="avg", priority=1, name="layer1.grad")
    ...                                               # compute while the daemon works
    req.wait()
    nodecomm.finalize()

Every collective is non-blocking and returns a Request (`.test()`, `.wait(timeout=None)`).
Buffers outside the arena work too, through one copy each way. Failures raise
nodecomm.Error with the daemon's message. `nodecomm.torch` (imported on first use) registers
the torch.distributed backend "nodecomm" and holds the DistributedDataParallel communication
hook.

The package is ctypes over libnodecomm's C API (nodecomm.h); it needs neither numpy nor torch
except for the calls that make their objects (alloc_array, alloc_tensor).
"""

import importlib

from ._capi import LIBRARY_PATH, Error
from ._capi import (ERR_DAEMON_LOST, ERR_INTERNAL, ERR_INVALID_ARGUMENT, ERR_MISMATCH,
                    ERR_NO_MEMORY, ERR_NOT_INITIALIZED, ERR_OUT_OF_RANGE, ERR_PEER_LOST,
                    ERR_PERMISSION, ERR_PROTOCOL, ERR_QUEUE_FULL, ERR_TIMEOUT, ERR_UNSUPPORTED,
                    OK)
from ._core import (Request, allgather, alloc_array, alloc_tensor, allreduce, alltoall,
                    arena_info, barrier, broadcast, finalize, init, initialized, is_arena,
                    local_rank, local_size, node_count, node_index, reduce, reduce_scatter,
                    register_fd, wait_all, world_rank, world_size)

__version__ = "0.1.0"
COMM_WORLD = 0

__all__ = [
    "Error", "Request", "LIBRARY_PATH", "COMM_WORLD", "init", "finalize", "initialized",
    "world_rank", "world_size", "node_index", "node_count", "local_rank", "local_size",
    "arena_info", "alloc_array", "alloc_tensor", "is_arena", "register_fd", "allreduce",
    "reduce",
    "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "wait_all",
    # status codes, as nodecomm.Error.status
    "OK", "ERR_INVALID_ARGUMENT", "ERR_OUT_OF_RANGE", "ERR_UNSUPPORTED", "ERR_MISMATCH",
    "ERR_PEER_LOST", "ERR_DAEMON_LOST", "ERR_TIMEOUT", "ERR_QUEUE_FULL", "ERR_NO_MEMORY",
    "ERR_NOT_INITIALIZED", "ERR_PROTOCOL", "ERR_PERMISSION", "ERR_INTERNAL",
]


def __getattr__(name):
    # `nodecomm.torch` imports torch; load it only when asked so that the core package works
    # without torch installed.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'nodecomm' has no attribute {name!r}")
