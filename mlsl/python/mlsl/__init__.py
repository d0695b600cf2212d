"""mlsl: the Intel MLSL 1.0 Python API, run by nodecomm (ctypes over libmlsl's C API, mlsl.h).

    import mlsl
    env = mlsl.MLSL()
    env.init()
    dist = env.create_distribution(env.get_process_count(), 1)
    req = dist.all_reduce(buf, buf, n, mlsl.DataType.FLOAT, mlsl.ReductionType.SUM,
                          mlsl.GroupType.GLOBAL)
    env.wait(req)
    env.finalize()

See mlsl.mlsl for what differs from MLSL's own module and for the nodecomm extensions;
docs/MLSL.md for the whole layer.
"""

from .mlsl import (MLSL, CompressionType, DataType, Error, GroupType, OperationType, PhaseType,
                   QuantParams, ReductionType, close)

__all__ = ["MLSL", "close", "DataType", "PhaseType", "GroupType", "ReductionType",
           "OperationType", "CompressionType", "QuantParams", "Error"]
