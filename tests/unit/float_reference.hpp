// Scalar reference rounding for the f16 / bf16 conversions, shared by the unit tests of
// daemon/kernels/reduce.cpp and daemon/kernels/wire_codec.cpp. Deliberately a different
// algorithm from the kernels: explicit significand shifting with a remainder/halfway comparison.
#pragma once

#include <algorithm>
#include <cstdint>

namespace nodecomm::test {

// `a` is |f| as bits, finite and nonzero. Returns the RNE encoding in a binary format with `mant`
// fraction bits, minimum normal exponent `emin` and exponent bias `bias`, saturating to inf_bits.
inline uint32_t RefRound(uint32_t a, int mant, int emin, int bias, uint32_t inf_bits) {
  const uint32_t field = a >> 23;
  const int e = field == 0 ? -126 : static_cast<int>(field) - 127;
  const uint64_t m = (a & 0x7FFFFF) | (field == 0 ? 0 : 0x800000);
  // |f| = m * 2^(e-23); the target's quantum at this magnitude is 2^(max(e, emin) - mant).
  const int shift = (std::max(e, emin) - mant) - (e - 23);
  uint64_t q = 0;
  if (shift <= 0) {
    q = m << -shift;
  } else if (shift < 40) {
    q = m >> shift;
    const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // A carry into the next binade falls out of the plain addition of the encodings.
  const uint64_t enc =
      e < emin ? q : (static_cast<uint64_t>(e + bias) << mant) + q - (uint64_t{1} << mant);
  return static_cast<uint32_t>(std::min<uint64_t>(enc, inf_bits));
}

}  // namespace nodecomm::test
