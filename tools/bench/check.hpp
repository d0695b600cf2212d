// Deterministic per-rank input patterns and an independent reference for allreduce results.
//
// Every pattern value is a small integer chosen so that the exact result is representable in
// the element type and no intermediate of any reduction order rounds: the result does not
// depend on how the implementation orders or groups its operations, so it can be compared
// bit for bit (floats by value, so that +0 == -0). Integer sums and products wrap modulo
// 2^bits, which is well defined, so they need no such care.
//
// Kept free of any backend so that tests can build inputs and check results with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nodecomm.h"

namespace nodecomm::bench {

// IEEE binary16 and bfloat16 conversions, round to nearest even. Written here rather than
// taken from the library so that the reference does not share the code it checks.
uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);

// Element size in bytes; 0 for an unknown dtype.
size_t dtype_bytes(nc_dtype_t dtype);
bool dtype_is_float(nc_dtype_t dtype);

// False where the result is undefined by design: avg on integer types (nodecomm rejects it
// with NC_ERR_INVALID_ARGUMENT).
bool reference_defined(nc_dtype_t dtype, nc_redop_t op);

// The inputs of one allreduce over `world_size` ranks, and its expected result.
class Pattern {
 public:
  Pattern(nc_dtype_t dtype, nc_redop_t op, int world_size);

  nc_dtype_t dtype() const { return dtype_; }
  nc_redop_t op() const { return op_; }
  int world_size() const { return world_size_; }

  // What rank `rank` contributes at element `index`.
  int64_t value(int rank, size_t index) const;
  // Writes `count` elements of rank `rank`'s input to `buffer`.
  void fill(int rank, void* buffer, size_t count) const;
  // Writes the expected result at `index` (one element) to `out`, combining all ranks'
  // values in rank order. Requires reference_defined().
  void expected(size_t index, void* out) const;

 private:
  nc_dtype_t dtype_;
  nc_redop_t op_;
  int world_size_;
  int64_t lo_ = 0;         // inclusive range of values for sum, avg, min, max
  uint64_t span_ = 1;      // hi - lo + 1
  int prod_twos_ = 0;      // prod: most ranks contributing a factor of 2 to one element
  bool negative_ = false;  // prod: whether factors may be negative
};

struct Mismatch {
  size_t index;
  std::string got;
  std::string expected;
};

// Compares `count` result elements with the reference and returns how many differ. The first
// `max_recorded` differences are appended to `recorded` (which may be null).
uint64_t verify(const Pattern& pattern, const void* result, size_t count,
                std::vector<Mismatch>* recorded, size_t max_recorded);

// One element, readably: "-3", "0.5 (0x3800)" for 16-bit floats.
std::string format_element(nc_dtype_t dtype, const void* element);

// Fills a receive buffer with 0xa5 bytes, which no pattern yields in the wide integer and
// float types (they read as huge or fractional values) and rarely in i8/u8 (-91, 165), so an
// implementation that leaves elements unwritten is caught. (All-ones would read as -1, the
// most common integer product.)
void poison(void* buffer, size_t bytes);

}  // namespace nodecomm::bench
