// Unit tests for daemon/reduce.{hpp,cpp}. Every check runs once per SIMD target that the kernels
// were compiled for and this CPU supports (forced through hwy::SetSupportedTargetsForTest), so the
// SSSE3/SSE4 software f16 path is exercised as well as the F16C/AVX-512 one. Results are compared
// bit for bit against a scalar reference written here, independent of the kernels.

#include "kernels/reduce.hpp"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "float_reference.hpp"
#include "simd_targets.hpp"

namespace nodecomm::daemon {
namespace {

using proto::DType;
using proto::RedOp;

constexpr size_t kNs[] = {1, 2, 3, 8};
constexpr size_t kCounts[] = {0, 1, 7, 63, 64, 65, 4099, 100003};
constexpr DType kDTypes[] = {DType::kF32, DType::kF64,  DType::kI32, DType::kI64,
                             DType::kF16, DType::kBF16, DType::kI8,  DType::kU8};
constexpr RedOp kOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax};

// ------------------------------------------------------------------------------------------------
// SIMD targets

// Once per target (simd_targets.hpp), named by reduction_target().
const std::vector<std::pair<int64_t, std::string>>& Targets() {
  return test::Targets<&reduction_target>();
}

template <class F>
void ForEachTarget(const F& f) {
  test::ForEachTarget<&reduction_target>(f);
}

// ------------------------------------------------------------------------------------------------
// Reference conversions. Deliberately a different algorithm from the kernels: explicit significand
// shifting with a remainder/halfway comparison.

uint32_t F32Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
float F32FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}

using test::RefRound;  // float_reference.hpp

uint16_t RefF32ToF16(float f) {
  const uint32_t b = F32Bits(f);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t a = b & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;
  if (a == 0x7F800000) return sign | 0x7C00;
  if (a == 0) return sign;
  return static_cast<uint16_t>(sign | RefRound(a, 10, -14, 15, 0x7C00));
}

uint16_t RefF32ToBF16(float f) {
  const uint32_t b = F32Bits(f);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t a = b & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7FC0;
  if (a == 0x7F800000) return sign | 0x7F80;
  if (a == 0) return sign;
  return static_cast<uint16_t>(sign | RefRound(a, 7, -126, 127, 0x7F80));
}

float RefF16ToF32(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  float mag;
  if (exp == 0x1F) {
    mag = m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(m), -24);
  } else {
    mag = std::ldexp(static_cast<float>(1024 + m), exp - 25);
  }
  return (h & 0x8000) ? -mag : mag;
}

float RefBF16ToF32(uint16_t h) {
  return F32FromBits(static_cast<uint32_t>(h) << 16);
}

bool F16IsNaN(uint16_t h) {
  return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
}
bool BF16IsNaN(uint16_t h) {
  return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
}

std::string Hex(uint64_t bits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(bits));
  return buf;
}

// ------------------------------------------------------------------------------------------------
// Per-dtype traits: storage and compute types, input generation, reference conversions.

// Values generated so that float results do not depend on evaluation order (the kernels fold in the
// same order as the reference anyway): small multiples of 1/8 for sum, a few significant bits near
// 1 for prod, arbitrary finite non-NaN values for min/max (and no -0, whose order against +0 is
// unspecified).
template <typename F>
F GenFloat(std::mt19937_64& rng, RedOp op) {
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  switch (op) {
    case RedOp::kSum:
      return static_cast<F>(static_cast<int>(rng() % 2049) - 1024) / 8;
    case RedOp::kProd: {
      const F mag = static_cast<F>(2 + rng() % 7) / 4;
      return (rng() & 1) ? -mag : mag;
    }
    default:
      for (;;) {
        const auto bits = static_cast<Bits>(rng());
        F f;
        std::memcpy(&f, &bits, sizeof(f));
        if (std::isnan(f)) continue;
        return f == 0 ? F{0} : f;
      }
  }
}

template <typename T>
T GenInt(std::mt19937_64& rng, RedOp op) {
  auto x = static_cast<T>(rng());
  // Mostly odd factors, so long products do not collapse to zero modulo 2^bits.
  if (op == RedOp::kProd && (rng() & 3) != 0) x = static_cast<T>(x | 1);
  return x;
}

template <typename T, DType kD>
struct PlainTraits {
  static constexpr DType kDType = kD;
  using Storage = T;
  using Compute = T;
  static Compute Widen(T x) { return x; }
  static T Narrow(Compute c) { return c; }
  static T Gen(std::mt19937_64& rng, RedOp op) {
    if constexpr (std::is_floating_point_v<T>) {
      return GenFloat<T>(rng, op);
    } else {
      return GenInt<T>(rng, op);
    }
  }
  static bool Same(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
      return std::memcmp(&a, &b, sizeof(T)) == 0;  // tells -0 from +0
    } else {
      return a == b;
    }
  }
  static std::string Show(T x) {
    if constexpr (std::is_floating_point_v<T>) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%a", static_cast<double>(x));
      return buf;
    } else if constexpr (std::is_signed_v<T>) {
      return std::to_string(static_cast<int64_t>(x));
    } else {
      return std::to_string(static_cast<uint64_t>(x));
    }
  }
};

template <DType kD, float (*kWiden)(uint16_t), uint16_t (*kNarrow)(float), bool (*kIsNaN)(uint16_t)>
struct HalfTraits {
  static constexpr DType kDType = kD;
  using Storage = uint16_t;
  using Compute = float;
  static float Widen(uint16_t h) { return kWiden(h); }
  static uint16_t Narrow(float f) { return kNarrow(f); }
  static uint16_t Gen(std::mt19937_64& rng, RedOp op) {
    if (op == RedOp::kSum || op == RedOp::kProd) return kNarrow(GenFloat<float>(rng, op));
    for (;;) {
      const auto h = static_cast<uint16_t>(rng());
      if (!kIsNaN(h)) return h == 0x8000 ? 0 : h;
    }
  }
  static bool Same(uint16_t a, uint16_t b) {
    if (kIsNaN(a) || kIsNaN(b)) return kIsNaN(a) && kIsNaN(b);
    return a == b;
  }
  static std::string Show(uint16_t h) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%04x (%a)", h, static_cast<double>(kWiden(h)));
    return buf;
  }
};

using F16Traits = HalfTraits<DType::kF16, RefF16ToF32, RefF32ToF16, F16IsNaN>;
using BF16Traits = HalfTraits<DType::kBF16, RefBF16ToF32, RefF32ToBF16, BF16IsNaN>;

template <class F>
void WithTraits(DType dtype, const F& f) {
  switch (dtype) {
    case DType::kF32:
      return f(PlainTraits<float, DType::kF32>{});
    case DType::kF64:
      return f(PlainTraits<double, DType::kF64>{});
    case DType::kI32:
      return f(PlainTraits<int32_t, DType::kI32>{});
    case DType::kI64:
      return f(PlainTraits<int64_t, DType::kI64>{});
    case DType::kF16:
      return f(F16Traits{});
    case DType::kBF16:
      return f(BF16Traits{});
    case DType::kI8:
      return f(PlainTraits<int8_t, DType::kI8>{});
    case DType::kU8:
      return f(PlainTraits<uint8_t, DType::kU8>{});
    default:
      FAIL() << "unknown dtype";
  }
}

// Integers combine in the unsigned type of the same width so that wrap-around is well defined.
template <typename C>
C RefCombine(RedOp op, C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    const auto ua = static_cast<U>(a);
    const auto ub = static_cast<U>(b);
    switch (op) {
      case RedOp::kSum:
        return static_cast<C>(static_cast<U>(ua + ub));
      case RedOp::kProd:
        return static_cast<C>(static_cast<U>(ua * ub));
      default:
        break;
    }
  } else {
    switch (op) {
      case RedOp::kSum:
        return a + b;
      case RedOp::kProd:
        return a * b;
      default:
        break;
    }
  }
  return op == RedOp::kMin ? (b < a ? b : a) : (a < b ? b : a);
}

template <class Tr>
void ExpectSame(const std::vector<typename Tr::Storage>& want, const typename Tr::Storage* got) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (Tr::Same(want[i], got[i])) continue;
    if (bad < 5) {
      ADD_FAILURE() << "element " << i << ": got " << Tr::Show(got[i]) << ", want "
                    << Tr::Show(want[i]);
    }
    ++bad;
  }
  if (bad != 0) ADD_FAILURE() << bad << " of " << want.size() << " elements differ";
}

uint64_t Seed(DType dtype, RedOp op, size_t n, size_t count) {
  return 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(dtype) << 56) ^
         (static_cast<uint64_t>(op) << 48) ^ (n << 32) ^ count;
}

// Inputs for one case. Each source lives in its own exactly sized allocation so that ASan reports
// any read past `count`; odd sources start one element in, so loads are unaligned too.
template <class Tr>
struct Inputs {
  using S = typename Tr::Storage;
  std::vector<std::vector<S>> bufs;
  std::vector<const void*> srcs;

  Inputs(RedOp op, size_t n, size_t count) : bufs(n), srcs(n) {
    std::mt19937_64 rng(Seed(Tr::kDType, op, n, count));
    for (size_t s = 0; s < n; ++s) {
      const size_t off = s & 1;
      bufs[s].resize(count + off);
      for (auto& x : bufs[s]) x = Tr::Gen(rng, op);
      srcs[s] = bufs[s].data() + off;
    }
  }
  const S* src(size_t s) const { return static_cast<const S*>(srcs[s]); }

  // Left fold in compute precision, in source order, as the kernels promise.
  std::vector<typename Tr::Compute> Fold(RedOp op, size_t count) const {
    std::vector<typename Tr::Compute> acc(count);
    for (size_t i = 0; i < count; ++i) {
      auto a = Tr::Widen(src(0)[i]);
      for (size_t s = 1; s < srcs.size(); ++s) a = RefCombine(op, a, Tr::Widen(src(s)[i]));
      acc[i] = a;
    }
    return acc;
  }
};

std::string CaseName(DType dtype, RedOp op, size_t n, size_t count) {
  return std::string(proto::dtype_name(dtype)) + " " + std::string(proto::redop_name(op)) +
         " n=" + std::to_string(n) + " count=" + std::to_string(count);
}

template <class Tr>
void CheckReduce(RedOp op) {
  using S = typename Tr::Storage;
  for (size_t n : kNs) {
    for (size_t count : kCounts) {
      SCOPED_TRACE(CaseName(Tr::kDType, op, n, count));
      const Inputs<Tr> in(op, n, count);
      std::vector<S> want(count);
      const auto folded = in.Fold(op, count);
      for (size_t i = 0; i < count; ++i) want[i] = Tr::Narrow(folded[i]);

      ForEachTarget([&] {
        std::vector<S> dst(count);
        if (count != 0) std::memset(dst.data(), 0xA5, count * sizeof(S));
        reduce(Tr::kDType, op, dst.data(), in.srcs.data(), n, count);
        {
          SCOPED_TRACE("separate dst");
          ExpectSame<Tr>(want, dst.data());
        }
        // dst aliases the first and, separately, the last source (the last may be unaligned).
        std::vector<size_t> aliases{0};
        if (n > 1) aliases.push_back(n - 1);
        for (size_t alias : aliases) {
          SCOPED_TRACE("dst == srcs[" + std::to_string(alias) + "]");
          std::vector<S> copy(in.bufs[alias]);
          auto srcs = in.srcs;
          S* alias_ptr = copy.data() + (alias & 1);
          srcs[alias] = alias_ptr;
          reduce(Tr::kDType, op, alias_ptr, srcs.data(), n, count);
          ExpectSame<Tr>(want, alias_ptr);
        }
      });
    }
  }
}

class ReduceTest : public ::testing::TestWithParam<std::tuple<DType, RedOp>> {};

TEST_P(ReduceTest, MatchesScalarReference) {
  const auto [dtype, op] = GetParam();
  WithTraits(dtype, [op = op](auto tr) { CheckReduce<decltype(tr)>(op); });
}

TEST_P(ReduceTest, AccumulateMatchesTwoInputReduce) {
  const auto [dtype, op] = GetParam();
  WithTraits(dtype, [op = op](auto tr) {
    using Tr = decltype(tr);
    using S = typename Tr::Storage;
    for (size_t count : kCounts) {
      SCOPED_TRACE(CaseName(Tr::kDType, op, 2, count));
      const Inputs<Tr> in(op, 2, count);
      const auto folded = in.Fold(op, count);
      std::vector<S> want(count);
      for (size_t i = 0; i < count; ++i) want[i] = Tr::Narrow(folded[i]);
      ForEachTarget([&] {
        std::vector<S> dst(in.src(0), in.src(0) + count);
        accumulate(Tr::kDType, op, dst.data(), in.srcs[1], count);
        ExpectSame<Tr>(want, dst.data());
      });
    }
  });
}

std::string ParamName(const ::testing::TestParamInfo<std::tuple<DType, RedOp>>& info) {
  return std::string(proto::dtype_name(std::get<0>(info.param))) + "_" +
         std::string(proto::redop_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllDTypesAndOps, ReduceTest,
                         ::testing::Combine(::testing::ValuesIn(kDTypes),
                                            ::testing::ValuesIn(kOps)),
                         ParamName);

// ------------------------------------------------------------------------------------------------
// reduce_widen: the unrounded f32 fold.

class ReduceWidenTest : public ::testing::TestWithParam<std::tuple<DType, RedOp>> {};

TEST_P(ReduceWidenTest, MatchesUnroundedReference) {
  const auto [dtype, op] = GetParam();
  WithTraits(dtype, [op = op](auto tr) {
    using Tr = decltype(tr);
    if constexpr (!std::is_same_v<typename Tr::Storage, uint16_t>) {
      FAIL() << "reduce_widen is only for f16/bf16";
    } else {
      for (size_t n : kNs) {
        for (size_t count : kCounts) {
          SCOPED_TRACE(CaseName(Tr::kDType, op, n, count));
          const Inputs<Tr> in(op, n, count);
          const std::vector<float> want = in.Fold(op, count);
          ForEachTarget([&] {
            std::vector<float> dst(count, -1.0f);
            reduce_widen(Tr::kDType, op, dst.data(), in.srcs.data(), n, count);
            ExpectSame<PlainTraits<float, DType::kF32>>(want, dst.data());
          });
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, ReduceWidenTest,
                         ::testing::Combine(::testing::Values(DType::kF16, DType::kBF16),
                                            ::testing::ValuesIn(kOps)),
                         ParamName);

// ------------------------------------------------------------------------------------------------
// Conversions.

// Every 16-bit pattern widens exactly like the reference, and reduce with n == 1 (widen, then
// narrow) gives the pattern back.
template <class Tr>
void CheckAllPatterns() {
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> want_f32(all.size());
  for (size_t i = 0; i < all.size(); ++i) want_f32[i] = Tr::Widen(all[i]);
  const void* srcs[1] = {all.data()};
  ForEachTarget([&] {
    std::vector<float> wide(all.size());
    reduce_widen(Tr::kDType, RedOp::kSum, wide.data(), srcs, 1, all.size());
    ExpectSame<PlainTraits<float, DType::kF32>>(want_f32, wide.data());
    std::vector<uint16_t> round_trip(all.size());
    reduce(Tr::kDType, RedOp::kMax, round_trip.data(), srcs, 1, all.size());
    ExpectSame<Tr>(all, round_trip.data());
  });
}

TEST(ReduceConversions, F16AllPatternsRoundTrip) {
  CheckAllPatterns<F16Traits>();
}
TEST(ReduceConversions, BF16AllPatternsRoundTrip) {
  CheckAllPatterns<BF16Traits>();
}

// The reference itself, against hand-checked encodings (the kernels are then held to it).
TEST(ReduceConversions, ReferenceKnownValues) {
  const float two_m8 = std::ldexp(1.0f, -8);
  const float two_m11 = std::ldexp(1.0f, -11);
  const float two_m25 = std::ldexp(1.0f, -25);
  EXPECT_EQ(RefF32ToBF16(1.0f + two_m8), 0x3F80);                  // tie, rounds down to even
  EXPECT_EQ(RefF32ToBF16(1.0f + 3 * two_m8), 0x3F82);              // tie, rounds up to even
  EXPECT_EQ(RefF32ToBF16(1.0f + two_m8 + two_m8 / 1024), 0x3F81);  // just above the tie
  EXPECT_EQ(RefF32ToBF16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(RefF32ToBF16(-0.0f), 0x8000);
  EXPECT_EQ(RefF32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(RefF32ToF16(1.0f + two_m11), 0x3C00);
  EXPECT_EQ(RefF32ToF16(1.0f + 3 * two_m11), 0x3C02);
  EXPECT_EQ(RefF32ToF16(65504.0f), 0x7BFF);
  EXPECT_EQ(RefF32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(RefF32ToF16(65520.0f), 0x7C00);  // tie between max finite and 2^16: inf
  EXPECT_EQ(RefF32ToF16(-1e9f), 0xFC00);
  EXPECT_EQ(RefF32ToF16(two_m25), 0x0000);      // tie, rounds down to even (zero)
  EXPECT_EQ(RefF32ToF16(3 * two_m25), 0x0002);  // tie, rounds up to even
  EXPECT_EQ(RefF32ToF16(std::nextafter(two_m25, 1.0f)), 0x0001);
  EXPECT_EQ(RefF32ToF16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(RefF32ToF16(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal tie carries to normal
  EXPECT_EQ(RefF16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(RefF16ToF32(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(RefF16ToF32(0xFC00)) && RefF16ToF32(0xFC00) < 0);
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto h16 = static_cast<uint16_t>(h);
    if (F16IsNaN(h16)) {
      EXPECT_TRUE(F16IsNaN(RefF32ToF16(RefF16ToF32(h16))));
    } else {
      EXPECT_EQ(RefF32ToF16(RefF16ToF32(h16)), h16) << Hex(h);
    }
  }
}

// f32 values that probe rounding: each representable value of the narrow format, the exact
// midpoint to its successor and one f32 ulp either side of that midpoint, both signs; plus specials
// and random bit patterns.
template <class Tr>
std::vector<float> RoundingProbes(uint16_t limit) {
  std::vector<float> v;
  for (uint32_t h = 0; h < limit; ++h) {
    const float lo = Tr::Widen(static_cast<uint16_t>(h));
    const float hi = Tr::Widen(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both are narrow-format values
    for (float f : {lo, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, hi)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), F32FromBits(0x7F800001),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 1e-30f, -1e-30f, 1e30f, 70000.0f}) {
    v.push_back(f);
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200001; ++i) v.push_back(F32FromBits(static_cast<uint32_t>(rng())));
  return v;
}

template <class Tr>
void CheckNarrow(uint16_t limit) {
  const std::vector<float> probes = RoundingProbes<Tr>(limit);
  std::vector<uint16_t> want(probes.size());
  for (size_t i = 0; i < probes.size(); ++i) want[i] = Tr::Narrow(probes[i]);
  ForEachTarget([&] {
    std::vector<uint16_t> got(probes.size());
    narrow_from_f32(Tr::kDType, got.data(), probes.data(), probes.size());
    ExpectSame<Tr>(want, got.data());
    for (size_t i = 0; i < probes.size(); ++i) {
      if (std::isnan(probes[i])) {
        ASSERT_TRUE(Tr::Same(got[i], want[i])) << "NaN must stay NaN";
      }
    }
  });
}

TEST(ReduceConversions, NarrowF16MatchesReference) {
  CheckNarrow<F16Traits>(0x7C00);
}
TEST(ReduceConversions, NarrowBF16MatchesReference) {
  CheckNarrow<BF16Traits>(0x7F80);
}

TEST(ReduceConversions, NarrowTiesExplicit) {
  const float two_m8 = std::ldexp(1.0f, -8);
  const float src[] = {1.0f + two_m8, 1.0f + 3 * two_m8, 65520.0f, std::ldexp(1.0f, -25)};
  ForEachTarget([&] {
    uint16_t bf[4];
    uint16_t f16[4];
    narrow_from_f32(DType::kBF16, bf, src, 4);
    narrow_from_f32(DType::kF16, f16, src, 4);
    EXPECT_EQ(bf[0], 0x3F80);
    EXPECT_EQ(bf[1], 0x3F82);
    EXPECT_EQ(f16[2], 0x7C00);
    EXPECT_EQ(f16[3], 0x0000);
  });
}

// Rounding happens once, after the f32 fold: bf16 1 + 2^-8 + 2^-8 is 1 + 2^-7 exactly, whereas
// rounding after each step would stick at 1.
TEST(ReduceConversions, HalfReduceRoundsOnceAtTheEnd) {
  const uint16_t one = 0x3F80;
  const uint16_t small = RefF32ToBF16(std::ldexp(1.0f, -8));
  const std::vector<uint16_t> a(9, one), b(9, small), c(9, small);
  const void* srcs[3] = {a.data(), b.data(), c.data()};
  ForEachTarget([&] {
    std::vector<uint16_t> dst(9);
    reduce(DType::kBF16, RedOp::kSum, dst.data(), srcs, 3, 9);
    for (uint16_t x : dst) EXPECT_EQ(x, 0x3F81);
    std::vector<uint16_t> two(9);
    reduce(DType::kBF16, RedOp::kSum, two.data(), srcs, 2, 9);
    for (uint16_t x : two) EXPECT_EQ(x, 0x3F80);  // 1 + 2^-8 alone is a tie, down to even
  });
}

// ------------------------------------------------------------------------------------------------
// divide_by

template <class Tr>
void CheckDivide(uint32_t divisor) {
  using S = typename Tr::Storage;
  for (size_t count : kCounts) {
    SCOPED_TRACE(std::string(proto::dtype_name(Tr::kDType)) + " / " + std::to_string(divisor) +
                 " count=" + std::to_string(count));
    const Inputs<Tr> in(RedOp::kMax, 1, count);  // arbitrary finite values
    std::vector<S> want(count);
    for (size_t i = 0; i < count; ++i) {
      const auto x = Tr::Widen(in.src(0)[i]);
      if constexpr (std::is_integral_v<typename Tr::Compute>) {
        want[i] = static_cast<S>(static_cast<int64_t>(x) / static_cast<int64_t>(divisor));
      } else {
        want[i] = Tr::Narrow(x / static_cast<typename Tr::Compute>(divisor));
      }
    }
    ForEachTarget([&] {
      std::vector<S> dst(in.src(0), in.src(0) + count);
      divide_by(Tr::kDType, dst.data(), count, divisor);
      ExpectSame<Tr>(want, dst.data());
    });
  }
}

class DivideTest : public ::testing::TestWithParam<DType> {};

TEST_P(DivideTest, MatchesReference) {
  WithTraits(GetParam(), [](auto tr) {
    for (uint32_t divisor : {1u, 2u, 3u, 7u, 8u, 1000u}) CheckDivide<decltype(tr)>(divisor);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, DivideTest, ::testing::ValuesIn(kDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(proto::dtype_name(info.param));
                         });

// ------------------------------------------------------------------------------------------------
// Odds and ends.

TEST(Reduce, AvgOpSumsLikeSum) {
  const std::vector<float> a{1, 2, 3}, b{4, 5, 6};
  const void* srcs[2] = {a.data(), b.data()};
  std::vector<float> dst(3);
  reduce(DType::kF32, RedOp::kAvg, dst.data(), srcs, 2, 3);
  EXPECT_EQ(dst, (std::vector<float>{5, 7, 9}));
  divide_by(DType::kF32, dst.data(), 3, 2);
  EXPECT_EQ(dst, (std::vector<float>{2.5f, 3.5f, 4.5f}));
}

TEST(Reduce, IntegerWrapAround) {
  const std::vector<int32_t> a{INT32_MAX, INT32_MIN, 65536};
  const std::vector<int32_t> b{1, -1, 65536};
  const void* srcs[2] = {a.data(), b.data()};
  ForEachTarget([&] {
    std::vector<int32_t> sum(3), prod(3);
    reduce(DType::kI32, RedOp::kSum, sum.data(), srcs, 2, 3);
    reduce(DType::kI32, RedOp::kProd, prod.data(), srcs, 2, 3);
    EXPECT_EQ(sum, (std::vector<int32_t>{INT32_MIN, INT32_MAX, 131072}));
    EXPECT_EQ(prod, (std::vector<int32_t>{INT32_MAX, INT32_MIN, 0}));
  });
}

// The one NaN case min/max guarantee on every target (see reduce.cpp): all inputs NaN gives NaN.
TEST(Reduce, MinMaxOfAllNaNIsNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> a(37, nan), b(37, nan);
  const std::vector<uint16_t> ha(37, 0x7E00), hb(37, 0x7E00), ba(37, 0x7FC0), bb(37, 0x7FC0);
  const void* fsrcs[2] = {a.data(), b.data()};
  const void* hsrcs[2] = {ha.data(), hb.data()};
  const void* bsrcs[2] = {ba.data(), bb.data()};
  ForEachTarget([&] {
    for (RedOp op : {RedOp::kMin, RedOp::kMax}) {
      std::vector<float> f(37);
      std::vector<uint16_t> h(37), bf(37);
      reduce(DType::kF32, op, f.data(), fsrcs, 2, 37);
      reduce(DType::kF16, op, h.data(), hsrcs, 2, 37);
      reduce(DType::kBF16, op, bf.data(), bsrcs, 2, 37);
      for (size_t i = 0; i < 37; ++i) {
        EXPECT_TRUE(std::isnan(f[i]));
        EXPECT_TRUE(F16IsNaN(h[i]));
        EXPECT_TRUE(BF16IsNaN(bf[i]));
      }
    }
  });
}

TEST(Reduce, ReportsTargets) {
  const std::string best = reduction_target();
  EXPECT_FALSE(best.empty());
  std::string all;
  bool found = false;
  for (const auto& [target, name] : Targets()) {
    all += " " + name;
    found = found || name == best;
  }
  EXPECT_TRUE(found) << best;
  std::printf("[ targets  ] dispatch picks %s; tested:%s\n", best.c_str(), all.c_str());
}

}  // namespace
}  // namespace nodecomm::daemon
