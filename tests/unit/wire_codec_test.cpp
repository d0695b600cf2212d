// Unit tests for daemon/wire_codec.{hpp,cpp}. The bit-exactness checks run once per SIMD target the
// kernels were compiled for and this CPU supports (forced through hwy::SetSupportedTargetsForTest),
// and compare against a scalar reference written here with different algorithms from the kernels
// (significand shifting for the 16-bit formats, plain scalar loops for int8).

#include "kernels/wire_codec.hpp"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "simd_targets.hpp"
#include "wire_codec_reference.hpp"

namespace nodecomm::daemon {
namespace {

using proto::Compression;
using proto::RedOp;
using namespace wire_reference;

constexpr size_t kCodecCounts[] = {0, 1, 7, 255, 256, 257, 4099};
constexpr Compression kAll[] = {Compression::kNone, Compression::kBF16, Compression::kF16,
                                Compression::kInt8};
constexpr Compression kLossy[] = {Compression::kBF16, Compression::kF16, Compression::kInt8};
constexpr RedOp kAccOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax, RedOp::kAvg};
constexpr float kInf = std::numeric_limits<float>::infinity();

std::string Name(Compression c) {
  return std::string(proto::compression_name(c));
}

// ------------------------------------------------------------------------------------------------
// SIMD targets

// Once per target (simd_targets.hpp), named by wire_codec_target().
const std::vector<std::pair<int64_t, std::string>>& CodecTargets() {
  return test::Targets<&wire_codec_target>();
}

template <class F>
void ForEachCodecTarget(const F& f) {
  test::ForEachTarget<&wire_codec_target>(f);
}

// ------------------------------------------------------------------------------------------------
// Comparison helpers

std::string Show(float f) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%a (0x%08x)", static_cast<double>(f), Bits(f));
  return buf;
}

// Bit for bit, NaN payloads and the sign of zero included.
void ExpectSameFloats(const std::vector<float>& want, const float* got, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (Bits(want[i]) == Bits(got[i])) continue;
    if (bad < 5) {
      ADD_FAILURE() << what << " element " << i << ": got " << Show(got[i]) << ", want "
                    << Show(want[i]);
    }
    ++bad;
  }
  if (bad != 0) ADD_FAILURE() << what << ": " << bad << " of " << want.size() << " differ";
}

void ExpectSameBytes(const std::vector<uint8_t>& want, const uint8_t* got, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == got[i]) continue;
    if (bad < 5) {
      ADD_FAILURE() << what << " byte " << i << ": got 0x" << std::hex << int{got[i]} << ", want 0x"
                    << int{want[i]} << std::dec;
    }
    ++bad;
  }
  if (bad != 0) ADD_FAILURE() << what << ": " << bad << " of " << want.size() << " bytes differ";
}

// A wire buffer at an odd address with guard bytes on both sides.
class WireBuf {
 public:
  static constexpr uint8_t kGuard = 0xA5;
  static constexpr size_t kPad = 17;
  explicit WireBuf(size_t n) : n_(n), mem_(n + 2 * kPad, kGuard) {}
  uint8_t* data() { return mem_.data() + kPad; }
  size_t size() const { return n_; }
  void Fill(const std::vector<uint8_t>& from) {
    if (!from.empty()) std::memcpy(data(), from.data(), from.size());
  }
  bool GuardsIntact() const {
    for (size_t i = 0; i < kPad; ++i) {
      if (mem_[i] != kGuard || mem_[kPad + n_ + i] != kGuard) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<uint8_t> mem_;
};

// f32 buffer with guard elements after the data.
class FloatBuf {
 public:
  static constexpr uint32_t kGuard = 0x7FA5A5A5;
  explicit FloatBuf(const std::vector<float>& from) : n_(from.size()), mem_(from) {
    mem_.resize(n_ + 16, FromBits(kGuard));
  }
  float* data() { return mem_.data(); }
  std::vector<float> vec() const { return {mem_.begin(), mem_.begin() + n_}; }
  bool GuardsIntact() const {
    for (size_t i = n_; i < mem_.size(); ++i) {
      if (Bits(mem_[i]) != kGuard) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<float> mem_;
};

// ------------------------------------------------------------------------------------------------
// Inputs

enum class Dist { kGaussian, kSpecials, kAnyBits, kTiny, kWide };
constexpr Dist kDists[] = {Dist::kGaussian, Dist::kSpecials, Dist::kAnyBits, Dist::kTiny,
                           Dist::kWide};

float Special(std::mt19937_64& rng) {
  static const float kSpecialValues[] = {
      0.0f,
      -0.0f,
      kInf,
      -kInf,
      FromBits(0x7FC00000u),  // quiet NaN
      FromBits(0xFFC12345u),  // negative quiet NaN with payload
      FromBits(0x7F800001u),  // signalling NaN
      FromBits(0x7FA00000u),  // signalling NaN, payload in the f16-visible bits
      std::numeric_limits<float>::max(),
      std::numeric_limits<float>::denorm_min(),
      std::numeric_limits<float>::min(),
      65504.0f,
      65519.996f,
      65520.0f,
      -1e10f,
      5.9604645e-08f,         // 2^-24, smallest f16 subnormal
      2.9802322e-08f,         // 2^-25, the tie below it
      FromBits(0x3F808000u),  // bf16 tie, rounds to even (down)
      FromBits(0x3F818000u),  // bf16 tie, rounds to even (up)
      FromBits(0x7F7FFFFFu),  // rounds to inf in bf16
  };
  return kSpecialValues[rng() % std::size(kSpecialValues)];
}

std::vector<float> Gen(Dist dist, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> out(n);
  for (auto& x : out) {
    switch (dist) {
      case Dist::kGaussian:
        x = normal(rng);
        break;
      case Dist::kSpecials:
        x = rng() % 64 == 0 ? Special(rng) : normal(rng);
        break;
      case Dist::kAnyBits:
        x = FromBits(static_cast<uint32_t>(rng()));
        break;
      case Dist::kTiny:  // subnormal and tiny normal values: int8 scales that are inexact or 0
        x = FromBits(static_cast<uint32_t>(rng() % 0x00900000u)) * ((rng() & 1) ? -1.0f : 1.0f);
        break;
      case Dist::kWide:  // every exponent, no inf/NaN
        x = std::ldexp(normal(rng), static_cast<int>(rng() % 250) - 125);
        break;
    }
  }
  return out;
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

uint64_t Seed(Compression c, Dist d, size_t count, uint64_t salt = 0) {
  return 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(c) << 56) ^
         (static_cast<uint64_t>(d) << 48) ^ (salt << 40) ^ count;
}

// Kernel wrappers returning fresh vectors, checking their buffers' guards.
std::vector<uint8_t> Encode(Compression c, const std::vector<float>& x) {
  WireBuf w(wire_bytes(c, x.size()));
  wire_encode(c, x.data(), x.size(), w.data());
  EXPECT_TRUE(w.GuardsIntact()) << "wire_encode wrote outside its buffer";
  return {w.data(), w.data() + w.size()};
}

std::vector<float> Decode(Compression c, const std::vector<uint8_t>& wire, size_t n) {
  WireBuf w(wire.size());
  w.Fill(wire);
  FloatBuf out(std::vector<float>(n, 0.0f));
  wire_decode(c, w.data(), n, out.data());
  EXPECT_TRUE(out.GuardsIntact()) << "wire_decode wrote past count";
  return out.vec();
}

std::vector<float> RoundTrip(Compression c, const std::vector<float>& x) {
  FloatBuf data(x);
  wire_round_trip(c, data.data(), x.size());
  EXPECT_TRUE(data.GuardsIntact()) << "wire_round_trip wrote past count";
  return data.vec();
}

// ------------------------------------------------------------------------------------------------
// Tests

TEST(WireCodec, WireBytes) {
  for (Compression c : kAll) {
    for (size_t n : {0, 1, 7, 255, 256, 257, 4099, 1 << 20}) {
      EXPECT_EQ(wire_bytes(c, n), RefWireBytes(c, n)) << Name(c) << " n=" << n;
    }
  }
  EXPECT_EQ(wire_bytes(Compression::kInt8, 256), 260u);
  EXPECT_EQ(wire_bytes(Compression::kInt8, 257), 265u);
}

TEST(WireCodec, TargetName) {
  EXPECT_FALSE(std::string(wire_codec_target()).empty());
  for (const auto& [target, name] : CodecTargets())
    std::printf("wire codec target: %s\n", name.c_str());
}

// Every entry point, every target, against the scalar reference, bit for bit.
TEST(WireCodec, SimdMatchesScalarReferenceBitForBit) {
  ForEachCodecTarget([] {
    for (Compression c : kAll) {
      for (size_t count : kCodecCounts) {
        for (Dist dist : kDists) {
          SCOPED_TRACE(Name(c) + " count " + std::to_string(count) + " dist " +
                       std::to_string(static_cast<int>(dist)));
          const auto x = Gen(dist, count, Seed(c, dist, count));

          const auto wire = Encode(c, x);
          ExpectSameBytes(RefEncode(c, x.data(), count), wire.data(), "encode");
          ExpectSameFloats(RefDecode(c, wire.data(), count), Decode(c, wire, count).data(),
                           "decode");
          ExpectSameFloats(RefDecode(c, wire.data(), count), RoundTrip(c, x).data(), "round trip");

          // Arbitrary wire bytes: any scale, any 16-bit pattern (signalling NaNs included).
          const auto noise = RandomBytes(wire_bytes(c, count), Seed(c, dist, count, 1));
          ExpectSameFloats(RefDecode(c, noise.data(), count), Decode(c, noise, count).data(),
                           "decode of random bytes");

          const auto dst0 = Gen(Dist::kSpecials, count, Seed(c, dist, count, 2));
          for (RedOp op : kAccOps) {
            SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)));
            for (const auto* src : {&wire, &noise}) {
              const auto dec = RefDecode(c, src->data(), count);
              std::vector<float> want(count);
              for (size_t i = 0; i < count; ++i) want[i] = RefCombine(op, dst0[i], dec[i]);
              WireBuf w(src->size());
              w.Fill(*src);
              FloatBuf dst(dst0);
              wire_decode_accumulate(c, op, w.data(), count, dst.data());
              EXPECT_TRUE(dst.GuardsIntact());
              ExpectSameFloats(want, dst.data(), "decode_accumulate");
            }
          }

          // Two feedback steps, so the second starts from a nonzero residual.
          std::vector<float> want_res(count, 0.0f);
          FloatBuf res(want_res);
          for (int step = 0; step < 2; ++step) {
            const auto g = Gen(dist, count, Seed(c, dist, count, 3 + step));
            const auto want_wire = RefFeedback(c, g.data(), want_res.data(), count);
            WireBuf w(wire_bytes(c, count));
            wire_encode_with_feedback(c, g.data(), res.data(), count, w.data());
            EXPECT_TRUE(w.GuardsIntact());
            EXPECT_TRUE(res.GuardsIntact());
            ExpectSameBytes(want_wire, w.data(), "feedback wire");
            ExpectSameFloats(want_res, res.data(), "feedback residual");
          }
        }
      }
    }
  });
}

TEST(WireCodec, NoneIsLossless) {
  const auto x = Gen(Dist::kAnyBits, 4099, 7);
  const auto wire = Encode(Compression::kNone, x);
  ASSERT_EQ(wire.size(), 4 * x.size());
  EXPECT_EQ(std::memcmp(wire.data(), x.data(), wire.size()), 0);
  ExpectSameFloats(x, Decode(Compression::kNone, wire, x.size()).data(), "decode");
  ExpectSameFloats(x, RoundTrip(Compression::kNone, x).data(), "round trip");
}

TEST(WireCodec, RepresentableValuesRoundTripExactly) {
  ForEachCodecTarget([] {
    std::mt19937_64 rng(11);
    for (size_t count : kCodecCounts) {
      std::vector<float> bf(count), h(count), q(count);
      for (size_t i = 0; i < count; ++i) {
        // Finite bf16 and f16 patterns, subnormals and zeros included.
        uint16_t b;
        do b = static_cast<uint16_t>(rng());
        while ((b & 0x7F80) == 0x7F80);
        bf[i] = RefFromBF16(b);
        do b = static_cast<uint16_t>(rng());
        while ((b & 0x7C00) == 0x7C00);
        h[i] = RefFromF16(b);
      }
      // int8: k * s with a power-of-two step s and a +-127 s in every block, so scale == s.
      for (size_t blk = 0; blk < count; blk += kInt8Block) {
        const float s = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 30);
        const size_t m = std::min(kInt8Block, count - blk);
        for (size_t i = 0; i < m; ++i) {
          q[blk + i] = static_cast<float>(static_cast<int>(rng() % 255) - 127) * s;
        }
        q[blk + rng() % m] = (rng() & 1 ? 127.0f : -127.0f) * s;
      }
      SCOPED_TRACE("count " + std::to_string(count));
      ExpectSameFloats(bf, RoundTrip(Compression::kBF16, bf).data(), "bf16");
      ExpectSameFloats(h, RoundTrip(Compression::kF16, h).data(), "f16");
      ExpectSameFloats(q, RoundTrip(Compression::kInt8, q).data(), "int8");
    }
  });
}

TEST(WireCodec, RelativeErrorBounds) {
  ForEachCodecTarget([] {
    std::mt19937_64 rng(12);
    const size_t n = 4099;
    // bf16 over (almost) the whole f32 normal range: |err| <= 2^-8 |x| (half an ulp is 2^-9).
    std::vector<float> x(n);
    for (auto& v : x) {
      v = std::ldexp(1.0f + static_cast<float>(rng() % (1 << 23)) * 0x1p-23f,
                     static_cast<int>(rng() % 250) - 125);
      if (rng() & 1) v = -v;
    }
    auto rt = RoundTrip(Compression::kBF16, x);
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      const double rel = std::fabs(static_cast<double>(rt[i]) - x[i]) / std::fabs(x[i]);
      worst = std::max(worst, rel);
      ASSERT_LE(rel, 0x1p-8) << "bf16 x=" << Show(x[i]) << " got " << Show(rt[i]);
    }
    EXPECT_GT(worst, 0x1p-10);  // the bound is nearly reached

    // f16 in its normal range [2^-14, 65504]: |err| <= 2^-11 |x|.
    for (auto& v : x) {
      v = std::ldexp(1.0f + static_cast<float>(rng() % (1 << 23)) * 0x1p-23f,
                     static_cast<int>(rng() % 30) - 14);
      v = std::min(v, 65504.0f);
      if (rng() & 1) v = -v;
    }
    rt = RoundTrip(Compression::kF16, x);
    for (size_t i = 0; i < n; ++i) {
      const double rel = std::fabs(static_cast<double>(rt[i]) - x[i]) / std::fabs(x[i]);
      ASSERT_LE(rel, 0x1p-11) << "f16 x=" << Show(x[i]) << " got " << Show(rt[i]);
    }
    // f16 subnormals: absolute error at most half the step, 2^-25.
    for (auto& v : x) v = std::ldexp(static_cast<float>(rng() % (1 << 20)), -34);
    rt = RoundTrip(Compression::kF16, x);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_LE(std::fabs(static_cast<double>(rt[i]) - x[i]), 0x1p-25) << Show(x[i]);
    }

    // int8: |err| <= scale / 2 per element, up to the rounding of x / scale and q * scale (two
    // f32 roundings at magnitude <= 127 scale, i.e. under 2^-16 scale together).
    for (float mag : {1e-30f, 1e-3f, 1.0f, 1e6f, 1e30f}) {
      for (auto& v : x) v = std::uniform_real_distribution<float>(-mag, mag)(rng);
      // One block with a single outlier, so that most of its values round to small q.
      x[300] = 1000 * mag;
      const auto wire = Encode(Compression::kInt8, x);
      rt = Decode(Compression::kInt8, wire, n);
      for (size_t i = 0; i < n; ++i) {
        float scale;
        std::memcpy(&scale, wire.data() + (i / kInt8Block) * (kInt8Block + 4), 4);
        ASSERT_GT(scale, 0.0f);
        ASSERT_LE(std::fabs(static_cast<double>(rt[i]) - x[i]), scale * (0.5 + 0x1p-16))
            << "int8 x=" << Show(x[i]) << " got " << Show(rt[i]) << " scale " << Show(scale);
      }
    }
  });
}

TEST(WireCodec, NaNAndInf) {
  ForEachCodecTarget([] {
    const float qnan = std::numeric_limits<float>::quiet_NaN();
    const float snan = FromBits(0x7F800001u);
    const std::vector<float> x = {qnan,
                                  -qnan,
                                  snan,
                                  kInf,
                                  -kInf,
                                  1e10f,
                                  -1e10f,
                                  65504.0f,
                                  65519.99f,
                                  65520.0f,
                                  FromBits(0x7F7FFFFFu),
                                  1.0f};
    const auto bf = RoundTrip(Compression::kBF16, x);
    const auto h = RoundTrip(Compression::kF16, x);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::isnan(bf[i])) << i;
      EXPECT_TRUE(std::isnan(h[i])) << i;
      EXPECT_EQ(Bits(bf[i]) & 0x00400000u, 0x00400000u) << "quiet";
      EXPECT_EQ(Bits(h[i]) & 0x00400000u, 0x00400000u) << "quiet";
    }
    EXPECT_TRUE(std::signbit(bf[1]));
    EXPECT_EQ(bf[3], kInf);
    EXPECT_EQ(bf[4], -kInf);
    EXPECT_LE(std::fabs(bf[5] - 1e10f), 0x1p-8f * 1e10f);
    EXPECT_EQ(bf[10], kInf);  // rounds up past the largest bf16
    EXPECT_EQ(bf[11], 1.0f);
    EXPECT_EQ(h[3], kInf);
    EXPECT_EQ(h[4], -kInf);
    EXPECT_EQ(h[5], kInf);  // f16 overflow
    EXPECT_EQ(h[6], -kInf);
    EXPECT_EQ(h[7], 65504.0f);
    EXPECT_EQ(h[8], 65504.0f);
    EXPECT_EQ(h[9], kInf);  // the tie between 65504 and 2^16 rounds to even, i.e. inf
    EXPECT_EQ(h[11], 1.0f);

    // int8: a non-finite value poisons exactly its own block (scale NaN, all q 0), nothing else.
    for (float bad : {qnan, snan, kInf, -kInf}) {
      std::vector<float> v(3 * kInt8Block + 5, 0.25f);
      v[kInt8Block + 17] = bad;
      const auto wire = Encode(Compression::kInt8, v);
      float scale;
      std::memcpy(&scale, wire.data() + kInt8Block + 4, 4);
      EXPECT_EQ(Bits(scale), 0x7FC00000u);
      for (size_t i = 0; i < kInt8Block; ++i) EXPECT_EQ(wire[kInt8Block + 8 + i], 0);
      const auto rt = Decode(Compression::kInt8, wire, v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (i / kInt8Block == 1) {
          ASSERT_TRUE(std::isnan(rt[i])) << i;
        } else {
          ASSERT_EQ(rt[i], 0.25f) << i;
        }
      }
      ExpectSameFloats(rt, RoundTrip(Compression::kInt8, v).data(), "round trip");
    }

    // All zeros: scale 0, q 0, decodes to +0. -0 inputs also come back as +0.
    const std::vector<float> zeros = {0.0f, -0.0f, 0.0f};
    const auto zw = Encode(Compression::kInt8, zeros);
    EXPECT_EQ(zw, std::vector<uint8_t>(7, 0));
    for (float z : RoundTrip(Compression::kInt8, zeros)) EXPECT_EQ(Bits(z), 0u);
  });
}

TEST(WireCodec, DecodeAccumulate) {
  ForEachCodecTarget([] {
    for (Compression c : kAll) {
      for (size_t count : kCodecCounts) {
        SCOPED_TRACE(Name(c) + " count " + std::to_string(count));
        const auto x = Gen(Dist::kGaussian, count, Seed(c, Dist::kGaussian, count, 5));
        const auto dst0 = Gen(Dist::kGaussian, count, Seed(c, Dist::kGaussian, count, 6));
        const auto wire = Encode(c, x);
        const auto dec = Decode(c, wire, count);
        for (RedOp op : kAccOps) {
          auto dst = dst0;
          wire_decode_accumulate(c, op, wire.data(), count, dst.data());
          for (size_t i = 0; i < count; ++i) {
            float want = dst0[i] + dec[i];
            if (op == RedOp::kProd) want = dst0[i] * dec[i];
            if (op == RedOp::kMin) want = std::min(dst0[i], dec[i]);
            if (op == RedOp::kMax) want = std::max(dst0[i], dec[i]);
            ASSERT_EQ(dst[i], want) << "op " << static_cast<int>(op) << " i " << i;
          }
        }
      }
    }
    // NaN on either side gives NaN for every op; ties keep dst (+0 vs -0).
    const std::vector<float> a = {std::nanf(""), 1.0f, 0.0f, -0.0f, kInf};
    const std::vector<float> b = {1.0f, std::nanf(""), -0.0f, 0.0f, -kInf};
    const auto wire = Encode(Compression::kNone, b);
    for (RedOp op : {RedOp::kSum, RedOp::kMin, RedOp::kMax}) {
      auto dst = a;
      wire_decode_accumulate(Compression::kNone, op, wire.data(), dst.size(), dst.data());
      EXPECT_TRUE(std::isnan(dst[0]));
      EXPECT_TRUE(std::isnan(dst[1]));
      if (op != RedOp::kSum) {
        EXPECT_FALSE(std::signbit(dst[2]));
        EXPECT_TRUE(std::signbit(dst[3]));
        EXPECT_EQ(dst[4], op == RedOp::kMin ? -kInf : kInf);
      } else {
        EXPECT_TRUE(std::isnan(dst[4]));  // inf + -inf
      }
    }
  });
}

// ------------------------------------------------------------------------------------------------
// Error feedback

struct FeedbackStats {
  double worst_excess = -1;     // max over steps and elements of |err| - bound (must stay <= 0)
  double final_max_err = 0;     // max |sum out - sum g| after the last step
  double max_bound = 0;         // the largest bound used
  double last_quarter_err = 0;  // max |err| over the last quarter of the steps
  double first_quarter_err = 0;
};

// Runs `steps` steps of gradients from gen(step, g) through the codec and checks after every step
// that |sum_t out_t - sum_t g_t| stays within the codec's single-step error (half an int8 step of
// the largest scale the element's block has had; half a bf16/f16 ulp of the largest |v| seen) plus
// the f32 rounding of the bookkeeping itself (one rounding of v = g + r and one of r = v - out per
// step, bounded by 2^-24 (|v| + |r|)).
template <class Gen>
FeedbackStats RunFeedback(Compression c, size_t count, int steps, bool feedback, const Gen& gen) {
  FeedbackStats st;
  std::vector<float> g(count), residual(count, 0.0f), out(count);
  std::vector<double> sum_g(count, 0.0), sum_out(count, 0.0), slack(count, 0.0),
      max_step(count, 0.0);
  WireBuf wire(wire_bytes(c, count));
  for (int t = 0; t < steps; ++t) {
    gen(t, g);
    if (feedback) {
      for (size_t i = 0; i < count; ++i) {
        const float v = g[i] + residual[i];
        slack[i] += 0x1p-24 * std::fabs(v);
      }
      wire_encode_with_feedback(c, g.data(), residual.data(), count, wire.data());
      for (size_t i = 0; i < count; ++i) slack[i] += 0x1p-24 * std::fabs(residual[i]);
    } else {
      wire_encode(c, g.data(), count, wire.data());
    }
    wire_decode(c, wire.data(), count, out.data());
    for (size_t i = 0; i < count; ++i) {
      if (c == Compression::kInt8) {
        float scale;
        std::memcpy(&scale, wire.data() + (i / kInt8Block) * (kInt8Block + 4), 4);
        max_step[i] = std::max(max_step[i], static_cast<double>(scale) * (0.5 + 0x1p-16));
      } else {
        // Half an ulp is at most 2^-8 |v| (bf16) or 2^-11 |v| (f16, normal range; f16 subnormals
        // are off by at most 2^-25), and |v| <= |out| (1 + 2^-7).
        const double rel = c == Compression::kBF16 ? 0x1p-8 : 0x1p-11;
        const double abs = c == Compression::kF16 ? 0x1p-25 : 0.0;
        max_step[i] = std::max(max_step[i], rel * (1 + 0x1p-7) * std::fabs(out[i]) + abs);
      }
    }
    double step_err = 0;
    for (size_t i = 0; i < count; ++i) {
      sum_g[i] += g[i];
      sum_out[i] += out[i];
      const double err = std::fabs(sum_out[i] - sum_g[i]);
      const double bound = max_step[i] + slack[i];
      st.worst_excess = std::max(st.worst_excess, err - bound);
      st.max_bound = std::max(st.max_bound, bound);
      step_err = std::max(step_err, err);
    }
    if (t < steps / 4) st.first_quarter_err = std::max(st.first_quarter_err, step_err);
    if (t >= steps - steps / 4) st.last_quarter_err = std::max(st.last_quarter_err, step_err);
    if (t == steps - 1) st.final_max_err = step_err;
  }
  return st;
}

TEST(WireCodec, ErrorFeedbackKeepsAccumulatedErrorBounded) {
  constexpr size_t kCount = 4099;
  constexpr int kSteps = 1000;
  for (Compression c : kLossy) {
    SCOPED_TRACE(Name(c));
    std::mt19937_64 rng(0xFEEDBACC);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const auto gaussian = [&](int, std::vector<float>& g) {
      for (auto& v : g) v = normal(rng);
    };
    const auto with = RunFeedback(c, kCount, kSteps, true, gaussian);
    EXPECT_LE(with.worst_excess, 0.0) << "accumulated error exceeded the one-step bound";
    // Bounded, not growing: the error late in the run is no larger than early on (up to noise).
    EXPECT_LE(with.last_quarter_err, 2 * with.first_quarter_err + 1e-6);

    rng.seed(0xFEEDBACC);
    const auto without = RunFeedback(c, kCount, kSteps, false, gaussian);
    std::printf("%s gaussian, %d steps: max |sum out - sum g| = %.3g with feedback, %.3g without\n",
                Name(c).c_str(), kSteps, with.final_max_err, without.final_max_err);
    EXPECT_GT(without.final_max_err, 5 * with.final_max_err);
  }
}

// A biased input that int8 rounds the same way every step: each block has one element at 127 s
// (so its scale is exactly s) and the rest at 0.3 s, which always quantises to 0. Without feedback
// the error grows by 0.3 s a step; with it, it stays under s / 2.
TEST(WireCodec, ErrorFeedbackFixesBiasedRounding) {
  constexpr size_t kCount = 4099;
  constexpr int kSteps = 1000;
  const float s = 0x1p-7f;
  const auto biased = [s](int, std::vector<float>& g) {
    for (size_t i = 0; i < g.size(); ++i) g[i] = (i % kInt8Block == 0 ? 127.0f : 0.3f) * s;
  };
  ForEachCodecTarget([&] {
    const auto with = RunFeedback(Compression::kInt8, kCount, kSteps, true, biased);
    const auto without = RunFeedback(Compression::kInt8, kCount, kSteps, false, biased);
    EXPECT_LE(with.worst_excess, 0.0);
    EXPECT_LE(with.final_max_err, 0.5 * s * (1 + 1e-3));
    EXPECT_NEAR(without.final_max_err, 0.3 * s * kSteps, 1e-3 * s * kSteps);
    EXPECT_GT(without.final_max_err, 100 * with.final_max_err);
  });
}

// An inf or NaN step must not poison later steps through the residual.
TEST(WireCodec, ErrorFeedbackRecoversFromNonFiniteStep) {
  ForEachCodecTarget([] {
    for (Compression c : kLossy) {
      SCOPED_TRACE(Name(c));
      const size_t n = 600;
      std::vector<float> residual(n, 0.0f), g(n, 0.1f), out(n);
      std::vector<uint8_t> wire(wire_bytes(c, n));
      wire_encode_with_feedback(c, g.data(), residual.data(), n, wire.data());
      g[300] = std::numeric_limits<float>::infinity();
      g[301] = std::nanf("");
      g[302] = 131072.0f;  // overflows f16, exact in bf16
      wire_encode_with_feedback(c, g.data(), residual.data(), n, wire.data());
      for (float r : residual) ASSERT_TRUE(std::isfinite(r));
      std::fill(g.begin(), g.end(), 0.1f);
      wire_encode_with_feedback(c, g.data(), residual.data(), n, wire.data());
      wire_decode(c, wire.data(), n, out.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << i;
        ASSERT_NEAR(out[i], 0.1f, 0.01f) << i;
      }
    }
  });
}

// residual may be the same buffer as src.
TEST(WireCodec, ErrorFeedbackAllowsSrcAliasingResidual) {
  for (Compression c : kAll) {
    auto a = Gen(Dist::kGaussian, 1000, 21);
    auto res = a;
    const auto src = a;
    std::vector<uint8_t> w1(wire_bytes(c, a.size())), w2(w1.size());
    wire_encode_with_feedback(c, src.data(), res.data(), a.size(), w1.data());
    wire_encode_with_feedback(c, a.data(), a.data(), a.size(), w2.data());
    EXPECT_EQ(w1, w2) << Name(c);
    ExpectSameFloats(res, a.data(), "residual");
  }
}

}  // namespace
}  // namespace nodecomm::daemon
