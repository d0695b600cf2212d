// Element-wise reduction on the host, for the baselines (MPI's user operations for 16-bit
// floats, Gloo's reduction functions) and the average they divide by afterwards. One
// implementation, so that both baselines round exactly alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "check.hpp"
#include "nodecomm.h"

namespace nodecomm::bench {

inline bool is_integer(nc_dtype_t dtype) {
  return dtype == NC_I32 || dtype == NC_I64 || dtype == NC_I8 || dtype == NC_U8;
}

inline bool is_half(nc_dtype_t dtype) {
  return dtype == NC_F16 || dtype == NC_BF16;
}

// out[i] = a[i] OP b[i]; out may alias a or b. NC_AVG sums (the caller divides afterwards:
// divide_average). 16-bit floats are widened to float, combined and rounded back at every
// step, where nodecomm rounds once: no difference for the benchmark's exact patterns.
void combine(nc_dtype_t dtype, nc_redop_t op, void* out, const void* a, const void* b,
             size_t count);

// Divides each element by n (the group size) in place: the average after a sum. Floating-point
// types only; integers are rejected up front (nodecomm does not average them either).
void divide_average(void* data, size_t count, nc_dtype_t dtype, int n);

}  // namespace nodecomm::bench
