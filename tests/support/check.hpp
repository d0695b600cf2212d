// Deterministic per-rank input patterns and an independent reference for reduction results,
// element by element. collectives.hpp builds every collective's reference on top of these.
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

// The inputs of one collective over `world_size` ranks, and (for reductions) its expected
// result.
class Pattern {
 public:
  // Inputs for a reduction with `op`: ranges chosen so that every result is exact.
  Pattern(nc_dtype_t dtype, nc_redop_t op, int world_size);
  // Inputs for a collective that only moves data. Values lie in [-100, 100] ([0, 200] for u8),
  // exact in every dtype, and at one index no two of up to 201 ranks share a value, so an
  // element taken from the wrong rank is always caught (from the wrong index, almost always).
  static Pattern for_copy(nc_dtype_t dtype, int world_size);

  nc_dtype_t dtype() const { return dtype_; }
  nc_redop_t op() const { return op_; }
  int world_size() const { return world_size_; }
  bool is_copy() const { return copy_; }

  // What rank `rank` contributes at element `index`.
  int64_t value(int rank, size_t index) const;
  // Writes `count` elements of rank `rank`'s input to `buffer`.
  void fill(int rank, void* buffer, size_t count) const;
  // Writes rank `rank`'s input at `index` (one element) to `out`.
  void input(int rank, size_t index, void* out) const;
  // Writes the expected result at `index` (one element) to `out`, combining all ranks'
  // values in rank order. Requires reference_defined() and a reduction pattern.
  void expected(size_t index, void* out) const;

 private:
  nc_dtype_t dtype_;
  nc_redop_t op_;
  int world_size_;
  int64_t lo_ = 0;         // inclusive range of values for sum, avg, min, max
  uint64_t span_ = 1;      // hi - lo + 1
  int prod_twos_ = 0;      // prod: most ranks contributing a factor of 2 to one element
  bool negative_ = false;  // prod: whether factors may be negative
  bool copy_ = false;      // for_copy(): values for data movement, no reduction
};

struct Mismatch {
  size_t index;
  std::string got;
  std::string expected;
  const char* buffer = "recv";  // which buffer of the rank: "recv", "send" or "buffer"
};

// Whether a result element equals the expected one: floating-point types by value (NaN never
// matches, +0 matches -0), integers bit for bit.
bool same_element(nc_dtype_t dtype, const void* got, const void* want);

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
inline constexpr unsigned char kPoisonByte = 0xa5;

}  // namespace nodecomm::bench
