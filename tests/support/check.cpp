#include "check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace nodecomm::bench {

uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffff;
  if (a >= 0x7f800000) {  // inf stays inf; NaN stays a (quiet) NaN
    return static_cast<uint16_t>(sign | 0x7c00 | (a > 0x7f800000 ? 0x200 | (a >> 13) : 0));
  }
  if (a >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (a >= 0x38800000) {                      // normal in binary16 (>= 2^-14)
    uint32_t r = a - 0x38000000;              // rebias the exponent from 127 to 15
    r += 0xfff + ((r >> 13) & 1);             // round to nearest even on the 13 dropped bits
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000) return sign;  // below half the smallest subnormal (2^-25): zero
  // Subnormal: the result is round(value * 2^24) units of 2^-24.
  const uint32_t mant = (a & 0x7fffff) | 0x800000;
  const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 here
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1))) ++m;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | m);
}

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t exp = (bits >> 10) & 0x1f;
  const uint32_t mant = bits & 0x3ff;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t f32_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);  // overflow reaches inf
}

float bf16_to_f32(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

size_t dtype_bytes(nc_dtype_t dtype) {
  switch (dtype) {
    case NC_I8:
    case NC_U8:
      return 1;
    case NC_F16:
    case NC_BF16:
      return 2;
    case NC_F32:
    case NC_I32:
      return 4;
    case NC_F64:
    case NC_I64:
      return 8;
  }
  return 0;
}

bool dtype_is_float(nc_dtype_t dtype) {
  return dtype == NC_F32 || dtype == NC_F64 || dtype == NC_F16 || dtype == NC_BF16;
}

bool reference_defined(nc_dtype_t dtype, nc_redop_t op) {
  return op != NC_AVG || dtype_is_float(dtype);
}

namespace {

// Storage tags for the 16-bit floats, so that the element type alone selects the conversion.
struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, F16>) {
    // Through float is exact for our values and, for any value, equal to rounding directly
    // (24 >= 2*11+2 bits, so the double rounding is innocuous).
    return F16{f32_to_f16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<T, BF16>) {
    return BF16{f32_to_bf16(static_cast<float>(v))};
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, F16>) {
    return f16_to_f32(v.bits);
  } else if constexpr (std::is_same_v<T, BF16>) {
    return bf16_to_f32(v.bits);
  } else {
    return static_cast<double>(v);
  }
}

template <class T>
constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, F16> || std::is_same_v<T, BF16>;

// Calls fn(T{}) with the storage type of `dtype`.
template <class Fn>
decltype(auto) dispatch(nc_dtype_t dtype, Fn&& fn) {
  switch (dtype) {
    case NC_F32:
      return fn(float{});
    case NC_F64:
      return fn(double{});
    case NC_I32:
      return fn(int32_t{});
    case NC_I64:
      return fn(int64_t{});
    case NC_F16:
      return fn(F16{});
    case NC_BF16:
      return fn(BF16{});
    case NC_I8:
      return fn(int8_t{});
    case NC_U8:
      return fn(uint8_t{});
  }
  throw std::invalid_argument(fmt::format("unknown dtype {}", static_cast<int>(dtype)));
}

uint64_t mix64(uint64_t x) {  // splitmix64's finalizer: every input bit affects every output bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Range [0, n) from the high 32 bits of a hash, without a division.
uint64_t below(uint64_t hash, uint64_t n) {
  return ((hash >> 32) * n) >> 32;
}

template <class T>
T expected_element(const Pattern& p, size_t index) {
  const int n = p.world_size();
  if constexpr (kIsFloat<T>) {
    // Exact in double for every pattern (integers far below 2^53), rounded to T once.
    double acc = static_cast<double>(p.value(0, index));
    for (int r = 1; r < n; ++r) {
      const double v = static_cast<double>(p.value(r, index));
      switch (p.op()) {
        case NC_SUM:
        case NC_AVG:
          acc += v;
          break;
        case NC_PROD:
          acc *= v;
          break;
        case NC_MIN:
          acc = std::min(acc, v);
          break;
        case NC_MAX:
          acc = std::max(acc, v);
          break;
      }
    }
    if (p.op() == NC_AVG) acc /= n;  // correctly rounded in double, then once more to T
    return from_double<T>(acc);
  } else {
    // Sums and products modulo 2^64 truncate to the same value as modulo 2^bits.
    uint64_t acc = static_cast<uint64_t>(p.value(0, index));
    int64_t extreme = p.value(0, index);
    for (int r = 1; r < n; ++r) {
      const int64_t v = p.value(r, index);
      switch (p.op()) {
        case NC_SUM:
          acc += static_cast<uint64_t>(v);
          break;
        case NC_PROD:
          acc *= static_cast<uint64_t>(v);
          break;
        case NC_MIN:
          extreme = std::min(extreme, v);
          break;
        case NC_MAX:
          extreme = std::max(extreme, v);
          break;
        case NC_AVG:
          throw std::logic_error("avg has no integer reference");
      }
    }
    if (p.op() == NC_MIN || p.op() == NC_MAX) return static_cast<T>(extreme);
    return static_cast<T>(acc);  // C++20: conversion to a narrower integer is modular
  }
}

template <class T>
std::string format_value(T v) {
  if constexpr (std::is_same_v<T, F16> || std::is_same_v<T, BF16>) {
    return fmt::format("{} (0x{:04x})", to_double(v), v.bits);
  } else if constexpr (sizeof(T) == 1) {
    return fmt::format("{}", static_cast<int>(v));  // not as a character
  } else {
    return fmt::format("{}", v);
  }
}

}  // namespace

Pattern Pattern::for_copy(nc_dtype_t dtype, int world_size) {
  // min/max inputs have the widest exact range; the copy flag changes how ranks differ.
  Pattern p(dtype, NC_MAX, world_size);
  p.copy_ = true;
  return p;
}

Pattern::Pattern(nc_dtype_t dtype, nc_redop_t op, int world_size)
    : dtype_(dtype), op_(op), world_size_(std::max(world_size, 1)) {
  const bool is_unsigned = dtype == NC_U8;
  negative_ = !is_unsigned;
  if (op == NC_SUM || op == NC_AVG) {
    // Small integers in [-8, 8] ([0, 3] for u8). The 16-bit floats hold integers exactly only
    // up to 2048 (f16) and 256 (bf16), and every partial sum must stay within that.
    int64_t amplitude = 8;
    if (dtype == NC_F16) amplitude = std::clamp<int64_t>(2048 / world_size_, 1, 8);
    if (dtype == NC_BF16) amplitude = std::clamp<int64_t>(256 / world_size_, 1, 8);
    lo_ = is_unsigned ? 0 : -amplitude;
    span_ = is_unsigned ? 4 : static_cast<uint64_t>(2 * amplitude + 1);
  } else if (op == NC_MIN || op == NC_MAX) {
    lo_ = is_unsigned ? 0 : -100;  // wide, so that a wrong pick is rarely right by chance
    span_ = 201;
  } else {
    // Products are mostly +-1 with a few factors of 2 per element, and an occasional 0: the
    // magnitude 2^k must stay finite and exact (f16 reaches 2^15) and, for the integer
    // types, not wrap to 0 (which would hide a wrong sign or a missing factor).
    int cap = 100;
    switch (dtype) {
      case NC_F16:
        cap = 15;
        break;
      case NC_I8:
        cap = 6;
        break;
      case NC_U8:
        cap = 7;
        break;
      case NC_I32:
        cap = 30;
        break;
      case NC_I64:
        cap = 62;
        break;
      default:
        break;
    }
    prod_twos_ = std::min(cap, world_size_);
  }
}

int64_t Pattern::value(int rank, size_t index) const {
  const uint64_t h = mix64(static_cast<uint64_t>(index) * 0x9e3779b97f4a7c15ull +
                           static_cast<uint64_t>(rank) * 0xd6e8feb86659fd93ull +
                           static_cast<uint64_t>(op_) * 0xa0761d6478bd642full + 1);
  if (copy_) {
    // Per index a hashed base, then per rank a step of 7 (coprime with the span of 201), so
    // the ranks' values at one index are pairwise distinct.
    const uint64_t base = below(mix64(static_cast<uint64_t>(index) ^ 0x2545f4914f6cdd1dull), span_);
    return lo_ + static_cast<int64_t>((base + 7 * static_cast<uint64_t>(rank)) % span_);
  }
  if (op_ != NC_PROD) return lo_ + static_cast<int64_t>(below(h, span_));
  if ((h & 63) == 0) return 0;
  // Which ranks contribute a 2 at this element: a run of `twos` ranks starting at `first`,
  // both drawn per element (the same on every rank), so no element exceeds prod_twos_.
  const uint64_t e = mix64(static_cast<uint64_t>(index) ^ 0x5851f42d4c957f2dull);
  const uint64_t n = static_cast<uint64_t>(world_size_);
  const uint64_t twos = below(e, static_cast<uint64_t>(prod_twos_) + 1);
  const uint64_t first = (e & 0xffffffffu) % n;
  const uint64_t offset = (static_cast<uint64_t>(rank) + n - first) % n;
  const int64_t magnitude = offset < twos ? 2 : 1;
  return negative_ && ((h >> 7) & 1) ? -magnitude : magnitude;
}

void Pattern::fill(int rank, void* buffer, size_t count) const {
  dispatch(dtype_, [&]<class T>(T) {
    T* out = static_cast<T*>(buffer);
    for (size_t i = 0; i < count; ++i) out[i] = from_double<T>(static_cast<double>(value(rank, i)));
  });
}

void Pattern::input(int rank, size_t index, void* out) const {
  dispatch(dtype_, [&]<class T>(T) {
    const T v = from_double<T>(static_cast<double>(value(rank, index)));
    std::memcpy(out, &v, sizeof v);
  });
}

void Pattern::expected(size_t index, void* out) const {
  if (copy_) throw std::logic_error("a copy pattern has no reduction result");
  dispatch(dtype_, [&]<class T>(T) {
    const T v = expected_element<T>(*this, index);
    std::memcpy(out, &v, sizeof v);
  });
}

uint64_t verify(const Pattern& pattern, const void* result, size_t count,
                std::vector<Mismatch>* recorded, size_t max_recorded) {
  if (pattern.is_copy()) throw std::logic_error("verify: a copy pattern has no reduction result");
  if (!reference_defined(pattern.dtype(), pattern.op())) {
    throw std::invalid_argument(fmt::format("no reference for redop {} on dtype {}",
                                            static_cast<int>(pattern.op()),
                                            static_cast<int>(pattern.dtype())));
  }
  return dispatch(pattern.dtype(), [&]<class T>(T) -> uint64_t {
    const T* got = static_cast<const T*>(result);
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      const T want = expected_element<T>(pattern, i);
      bool same;
      if constexpr (kIsFloat<T>) {
        same = to_double(got[i]) == to_double(want);  // NaN never matches; +0 matches -0
      } else {
        same = got[i] == want;
      }
      if (same) continue;
      if (recorded != nullptr && wrong < max_recorded) {
        recorded->push_back({i, format_value(got[i]), format_value(want)});
      }
      ++wrong;
    }
    return wrong;
  });
}

bool same_element(nc_dtype_t dtype, const void* got, const void* want) {
  return dispatch(dtype, [&]<class T>(T) {
    T a;
    T b;
    std::memcpy(&a, got, sizeof a);
    std::memcpy(&b, want, sizeof b);
    if constexpr (kIsFloat<T>) {
      return to_double(a) == to_double(b);
    } else {
      return a == b;
    }
  });
}

std::string format_element(nc_dtype_t dtype, const void* element) {
  return dispatch(dtype, [&]<class T>(T) {
    T v;
    std::memcpy(&v, element, sizeof v);
    return format_value(v);
  });
}

void poison(void* buffer, size_t bytes) {
  std::memset(buffer, kPoisonByte, bytes);
}

}  // namespace nodecomm::bench
