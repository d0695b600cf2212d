// Wire compression of f32 allreduce data (see wire_codec.hpp), as Google Highway kernels compiled
// once per SIMD target and dispatched at run time (never -march=native). Like reduce.cpp, this file
// includes itself once per target through hwy/foreach_target.h, so daemon/ must be on the include
// path of whatever compiles it.
//
// Every target produces the same bits, NaN payloads included, for every input: the conversions are
// integer bit manipulation or single IEEE operations (add, sub, mul, div) in the default rounding
// mode (round to nearest even), and nothing depends on the lane count. The unit tests compare every
// target against an independent scalar reference.
//
// Wire formats (little-endian, no alignment):
//  - kNone: the f32 values as they are.
//  - kBF16: the upper half of the f32 pattern, rounded to nearest even. A NaN keeps its sign
//    and the top 7 payload bits and is made quiet (| 0x0040).
//  - kF16: IEEE binary16, rounded to nearest even; magnitudes >= 65520 become inf, subnormals are
//    kept. A NaN keeps its sign and the top 9 payload bits and is made quiet (| 0x0200), as x86's
//    vcvtps2ph does. Decoding is exact; a signalling f16 NaN decodes to a quiet f32 NaN (as
//    vcvtph2ps does).
//  - kInt8: per block of kInt8Block elements (the last one may be shorter) a f32 scale, then one
//    int8 per element. scale = max|x| / 127 (one f32 division); q = round_nearest_even(x / scale)
//    clamped to [-127, 127] (x / scale is one f32 division, so the clamp only matters when the
//    scale is subnormal and inexact). Decoding gives q * scale (one f32 multiplication), so
//    |x - decoded| <= scale / 2, up to an ulp of max|x|, for normal scales. A block whose scale
//    rounds to 0 (every |x| below about 64 * 2^-149) is sent as scale 0 and all q = 0. A block
//    holding an inf or a NaN is sent as scale = quiet NaN (0x7FC00000) and all q = 0, so every
//    element of it decodes to NaN: the block is poisoned deterministically, not guessed at.
//
// Other behaviour:
//  - wire_decode_accumulate: kAvg is kSum (the summing stage of an average); kProd multiplies.
//    Sum and prod follow x86's NaN rule on every target: if dst[i] is NaN the result is dst[i]
//    made quiet, else if the decoded value is NaN it is that value made quiet. Min/max are
//    defined here rather than by the hardware: a NaN on either side gives NaN (dst's if both are
//    NaN, made quiet), and on a tie (including +0 against -0) dst[i] is kept.
//  - wire_encode_with_feedback keeps a residual only where it is finite: where
//    v - decode(encode(v)) is inf or NaN (an inf or NaN in v, an f16 overflow, an int8 block
//    poisoned by a non-finite value) the residual is set to 0. One overflowing step, e.g. a
//    loss-scaling overflow that the trainer skips, therefore cannot poison all later steps. src
//    may be the same pointer as residual.
//  - Compression values outside the enum are treated as kNone (wire_bytes() does the same).
//  - Nothing allocates: data is processed in chunks of kInt8Block elements straight from the
//    caller's buffers, and the last partial chunk goes through zero-padded stack buffers so that
//    it runs the very same vector code.

// GCC contracts a*b+c into an FMA across separate intrinsics by default in C++ (even with
// -std=c++20), and only on targets that have FMA, which would make q * scale + dst and
// v - q * scale differ between targets. This must precede every include so that all inline
// functions in this file share the option (GCC will not inline across a mismatch). Clang only
// contracts within one source expression, which never spans two Highway calls.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "kernels/wire_codec.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/wire_codec.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Per target, like this file, and after the fp-contract pragma above.
#include "float_convert-inl.h"

HWY_BEFORE_NAMESPACE();
// A namespace of its own: reduce.cpp defines helpers with the same names in
// nodecomm::daemon::HWY_NAMESPACE, and two different inline templates with one name break the ODR.
namespace nodecomm::daemon::wire_kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using proto::Compression;
using proto::RedOp;

// At most 64 lanes, so a kInt8Block block is always a whole number of vectors.
using DF = hn::CappedTag<float, 64>;
static_assert(kInt8Block % 64 == 0, "int8 blocks must hold whole vectors");

// f16 / bf16 <-> f32 conversions shared with reduce.cpp (float_convert-inl.h). kHwF16: with F16C,
// Highway's f16 PromoteTo/DemoteTo are vcvtph2ps / vcvtps2ph (round to nearest even); below that
// the integer conversions, which reproduce F16C bit for bit, are used.
using hn::float_convert::BF16BitsToF32;
using hn::float_convert::F16BitsToF32;
using hn::float_convert::F32ToBF16Bits;
using hn::float_convert::F32ToF16Bits;
using hn::float_convert::kHwF16;

constexpr uint32_t kQuietBit = 0x00400000u;
constexpr uint32_t kCanonicalNaN = 0x7FC00000u;

// ------------------------------------------------------------------------------------------------
// Small vector helpers.

template <class D>
HWY_INLINE hn::Mask<D> IsNaNBits(D df, hn::Vec<D> v) {
  const hn::RebindToSigned<D> di;
  const auto mag = hn::And(hn::BitCast(di, v), hn::Set(di, 0x7FFFFFFF));
  return hn::RebindMask(df, hn::Gt(mag, hn::Set(di, 0x7F800000)));
}

template <class D>
HWY_INLINE hn::Vec<D> Quiet(D df, hn::Vec<D> v) {
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(df, hn::Or(hn::BitCast(du, v), hn::Set(du, kQuietBit)));
}

// v where it is finite, else 0. |NaN| < inf is false.
template <class D>
HWY_INLINE hn::Vec<D> FiniteOrZero(D df, hn::Vec<D> v) {
  return hn::IfThenElseZero(hn::Lt(hn::Abs(v), hn::Set(df, std::numeric_limits<float>::infinity())),
                            v);
}

// ------------------------------------------------------------------------------------------------
// Element formats (kNone, kBF16, kF16): Encode a f32 vector to its packed form, Decode it back, and
// Store/Load the packed form at an unaligned byte address.

struct PlainFormat {
  static constexpr size_t kBytes = 4;
  static HWY_INLINE hn::Vec<DF> Encode(DF /*df*/, hn::Vec<DF> v) { return v; }
  static HWY_INLINE hn::Vec<DF> Decode(DF /*df*/, hn::Vec<DF> p) { return p; }
  static HWY_INLINE void Store(DF df, hn::Vec<DF> p, uint8_t* out) {
    hn::StoreU(p, df, reinterpret_cast<float*>(out));
  }
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint8_t* in) {
    return hn::LoadU(df, reinterpret_cast<const float*>(in));
  }
};

// Patterns in [0, 0xFFFF] held in u32 lanes <-> u16 lanes. The saturating i32 -> u16 DemoteTo is
// exact for that range and exists on every target in Highway 1.0.3.
using DH = hn::Rebind<uint16_t, DF>;

HWY_INLINE hn::Vec<DH> NarrowBits(hn::Vec<hn::RebindToUnsigned<DF>> bits) {
  const hn::RebindToSigned<DF> di;
  return hn::DemoteTo(DH(), hn::BitCast(di, bits));
}

HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> WidenBits(hn::Vec<DH> h) {
  return hn::PromoteTo(hn::RebindToUnsigned<DF>(), h);
}

HWY_INLINE void StoreBits(hn::Vec<DH> h, uint8_t* out) {
  hn::StoreU(h, DH(), reinterpret_cast<uint16_t*>(out));
}

HWY_INLINE hn::Vec<DH> LoadBits(const uint8_t* in) {
  return hn::LoadU(DH(), reinterpret_cast<const uint16_t*>(in));
}

struct BF16Format {
  static constexpr size_t kBytes = 2;
  static HWY_INLINE hn::Vec<DH> Encode(DF df, hn::Vec<DF> v) {
    return NarrowBits(F32ToBF16Bits(df, v));
  }
  static HWY_INLINE hn::Vec<DF> Decode(DF df, hn::Vec<DH> p) {
    return BF16BitsToF32(df, WidenBits(p));
  }
  static HWY_INLINE void Store(DF /*df*/, hn::Vec<DH> p, uint8_t* out) { StoreBits(p, out); }
  static HWY_INLINE hn::Vec<DH> Load(DF /*df*/, const uint8_t* in) { return LoadBits(in); }
};

struct F16SoftFormat {
  static constexpr size_t kBytes = 2;
  static HWY_INLINE hn::Vec<DH> Encode(DF df, hn::Vec<DF> v) {
    return NarrowBits(F32ToF16Bits(df, v));
  }
  static HWY_INLINE hn::Vec<DF> Decode(DF df, hn::Vec<DH> p) {
    return F16BitsToF32</*kQuietNaN=*/true>(df, WidenBits(p));
  }
  static HWY_INLINE void Store(DF /*df*/, hn::Vec<DH> p, uint8_t* out) { StoreBits(p, out); }
  static HWY_INLINE hn::Vec<DH> Load(DF /*df*/, const uint8_t* in) { return LoadBits(in); }
};

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
struct F16HwFormat {
  using DF16 = hn::Rebind<hwy::float16_t, DF>;
  static constexpr size_t kBytes = 2;
  static HWY_INLINE hn::Vec<DF16> Encode(DF /*df*/, hn::Vec<DF> v) {
    return hn::DemoteTo(DF16(), v);
  }
  static HWY_INLINE hn::Vec<DF> Decode(DF df, hn::Vec<DF16> p) { return hn::PromoteTo(df, p); }
  static HWY_INLINE void Store(DF /*df*/, hn::Vec<DF16> p, uint8_t* out) {
    hn::StoreU(p, DF16(), reinterpret_cast<hwy::float16_t*>(out));
  }
  static HWY_INLINE hn::Vec<DF16> Load(DF /*df*/, const uint8_t* in) {
    return hn::LoadU(DF16(), reinterpret_cast<const hwy::float16_t*>(in));
  }
};
using F16Format = F16HwFormat;
#else
using F16Format = F16SoftFormat;
#endif
static_assert(kHwF16 == !std::is_same_v<F16Format, F16SoftFormat>);

// ------------------------------------------------------------------------------------------------
// Combining decoded values into dst (wire_decode_accumulate). a = dst, b = decoded.

struct OpSum {
  static HWY_INLINE hn::Vec<DF> Apply(DF df, hn::Vec<DF> a, hn::Vec<DF> b) {
    // x86 already returns quiet(a) when both are NaN; this makes every target do so.
    return hn::IfThenElse(IsNaNBits(df, a), Quiet(df, a), hn::Add(a, b));
  }
};
struct OpProd {
  static HWY_INLINE hn::Vec<DF> Apply(DF df, hn::Vec<DF> a, hn::Vec<DF> b) {
    return hn::IfThenElse(IsNaNBits(df, a), Quiet(df, a), hn::Mul(a, b));
  }
};
template <bool kMax>
struct OpMinMax {
  static HWY_INLINE hn::Vec<DF> Apply(DF df, hn::Vec<DF> a, hn::Vec<DF> b) {
    // Comparisons with a NaN are false, so a NaN `a` survives the first step.
    const auto r = hn::IfThenElse(kMax ? hn::Gt(b, a) : hn::Lt(b, a), b, a);
    const auto r2 = hn::IfThenElse(IsNaNBits(df, b), Quiet(df, b), r);
    return hn::IfThenElse(IsNaNBits(df, a), Quiet(df, a), r2);
  }
};
using OpMin = OpMinMax<false>;
using OpMax = OpMinMax<true>;

// ------------------------------------------------------------------------------------------------
// Chunk kernels. Every kernel takes the same pointers (null where unused):
//   src  f32 input (encode, feedback), io f32 output or in/out (decode, accumulate dst, round-trip
//   data, feedback residual), win wire input, wout wire output,
// for n elements, n a multiple of Lanes(DF()) and at most kInt8Block. For int8 a chunk is exactly
// one block.

enum class Kind { kEncode, kDecode, kAccumulate, kRoundTrip, kFeedback };

template <class Format, Kind K, class Op>
struct ElementChunk {
  static void Run(const float* src, float* io, const uint8_t* win, uint8_t* wout, size_t n) {
    const DF df;
    constexpr size_t kB = Format::kBytes;
    const size_t lanes = hn::Lanes(df);
    for (size_t i = 0; i < n; i += lanes) {
      if constexpr (K == Kind::kEncode) {
        Format::Store(df, Format::Encode(df, hn::LoadU(df, src + i)), wout + i * kB);
      } else if constexpr (K == Kind::kDecode) {
        hn::StoreU(Format::Decode(df, Format::Load(df, win + i * kB)), df, io + i);
      } else if constexpr (K == Kind::kAccumulate) {
        const auto decoded = Format::Decode(df, Format::Load(df, win + i * kB));
        hn::StoreU(Op::Apply(df, hn::LoadU(df, io + i), decoded), df, io + i);
      } else if constexpr (K == Kind::kRoundTrip) {
        hn::StoreU(Format::Decode(df, Format::Encode(df, hn::LoadU(df, io + i))), df, io + i);
      } else {
        const auto v = hn::Add(hn::LoadU(df, src + i), hn::LoadU(df, io + i));
        const auto packed = Format::Encode(df, v);
        Format::Store(df, packed, wout + i * kB);
        hn::StoreU(FiniteOrZero(df, hn::Sub(v, Format::Decode(df, packed))), df, io + i);
      }
    }
  }
};

using D8 = hn::Rebind<int8_t, DF>;

template <Kind K, class Op>
struct Int8Chunk {
  static void Run(const float* src, float* io, const uint8_t* win, uint8_t* wout, size_t n) {
    const DF df;
    const hn::RebindToSigned<DF> di;
    const D8 d8;
    const size_t lanes = hn::Lanes(df);

    if constexpr (K == Kind::kDecode || K == Kind::kAccumulate) {
      float scale;
      std::memcpy(&scale, win, sizeof(scale));
      const auto vscale = hn::Set(df, scale);
      const auto* q = reinterpret_cast<const int8_t*>(win + sizeof(float));
      for (size_t i = 0; i < n; i += lanes) {
        const auto decoded =
            hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, q + i))), vscale);
        if constexpr (K == Kind::kDecode) {
          hn::StoreU(decoded, df, io + i);
        } else {
          hn::StoreU(Op::Apply(df, hn::LoadU(df, io + i), decoded), df, io + i);
        }
      }
      return;
    } else {
      // The value to send. Feedback recomputes src + residual in the second pass rather than
      // buffering it; the sum is the same both times.
      const auto value = [&](size_t i) {
        if constexpr (K == Kind::kEncode) {
          return hn::LoadU(df, src + i);
        } else if constexpr (K == Kind::kRoundTrip) {
          return hn::LoadU(df, io + i);
        } else {
          return hn::Add(hn::LoadU(df, src + i), hn::LoadU(df, io + i));
        }
      };

      // Pass 1: max |x| as the integer maximum of the sign-cleared patterns, which orders finite
      // values by magnitude, puts inf above them and NaN above inf, on every target alike.
      auto amax = hn::Zero(di);
      for (size_t i = 0; i < n; i += lanes) {
        amax = hn::Max(amax, hn::And(hn::BitCast(di, value(i)), hn::Set(di, 0x7FFFFFFF)));
      }
      HWY_ALIGN int32_t amax_lanes[hn::MaxLanes(DF())];
      hn::Store(amax, di, amax_lanes);
      const uint32_t amax_bits =
          static_cast<uint32_t>(*std::max_element(amax_lanes, amax_lanes + lanes));

      float scale;
      bool quantize;
      if (amax_bits >= 0x7F800000u) {  // inf or NaN in the block
        scale = std::bit_cast<float>(kCanonicalNaN);
        quantize = false;
      } else {
        scale = std::bit_cast<float>(amax_bits) / 127.0f;
        quantize = scale > 0.0f;
      }
      if constexpr (K != Kind::kRoundTrip) std::memcpy(wout, &scale, sizeof(scale));
      int8_t* q = nullptr;
      if constexpr (K != Kind::kRoundTrip) q = reinterpret_cast<int8_t*>(wout + sizeof(float));

      // Pass 2. x / scale is rounded to nearest even by adding and subtracting 1.5 * 2^23 (exact
      // for |t| <= 2^22, and gives +0 rather than -0 for small negatives, so the decoder's q *
      // scale matches what is computed here). The clamp comes first, which is the same thing as
      // clamping the rounded value because the bounds are integers.
      const auto vscale = hn::Set(df, scale);
      const auto lo = hn::Set(df, -127.0f);
      const auto hi = hn::Set(df, 127.0f);
      const auto magic = hn::Set(df, 12582912.0f);
      for (size_t i = 0; i < n; i += lanes) {
        const auto v = value(i);
        auto qi = hn::Zero(di);
        if (quantize) {
          const auto t = hn::Min(hn::Max(hn::Div(v, vscale), lo), hi);
          qi = hn::ConvertTo(di, hn::Sub(hn::Add(t, magic), magic));
        }
        if constexpr (K != Kind::kRoundTrip) hn::StoreU(hn::DemoteTo(d8, qi), d8, q + i);
        if constexpr (K != Kind::kEncode) {
          // Exactly what the decoder computes from the stored q and scale.
          const auto decoded = hn::Mul(hn::ConvertTo(df, qi), vscale);
          if constexpr (K == Kind::kRoundTrip) {
            hn::StoreU(decoded, df, io + i);
          } else {
            hn::StoreU(FiniteOrZero(df, hn::Sub(v, decoded)), df, io + i);
          }
        }
      }
    }
  }
};

// ------------------------------------------------------------------------------------------------
// Driver: whole chunks straight from the caller's buffers, the rest through zero-padded stack
// buffers (zeros do not change an int8 block's max |x|, and their outputs are dropped).

constexpr size_t kChunk = kInt8Block;

template <class Chunk>
void Drive(Compression c, const float* src, float* io, const uint8_t* win, uint8_t* wout,
           size_t count) {
  size_t i = 0;
  for (; i + kChunk <= count; i += kChunk) {
    const size_t w = wire_bytes(c, i);
    Chunk::Run(src ? src + i : nullptr, io ? io + i : nullptr, win ? win + w : nullptr,
               wout ? wout + w : nullptr, kChunk);
  }
  if (i == count) return;

  const size_t rem = count - i;
  const size_t lanes = hn::Lanes(DF());
  const size_t padded = (rem + lanes - 1) / lanes * lanes;
  const size_t w = wire_bytes(c, i);
  const size_t w_rem = wire_bytes(c, rem);
  const size_t w_padded = wire_bytes(c, padded);
  HWY_ALIGN float src_buf[kChunk];
  HWY_ALIGN float io_buf[kChunk];
  HWY_ALIGN uint8_t win_buf[sizeof(float) * (kChunk + 1)];
  HWY_ALIGN uint8_t wout_buf[sizeof(float) * (kChunk + 1)];
  const auto fill = [](void* buf, const void* from, size_t used, size_t total) {
    std::memcpy(buf, from, used);
    std::memset(static_cast<uint8_t*>(buf) + used, 0, total - used);
  };
  if (src) fill(src_buf, src + i, rem * sizeof(float), padded * sizeof(float));
  if (io) fill(io_buf, io + i, rem * sizeof(float), padded * sizeof(float));
  if (win) fill(win_buf, win + w, w_rem, w_padded);
  Chunk::Run(src ? src_buf : nullptr, io ? io_buf : nullptr, win ? win_buf : nullptr,
             wout ? wout_buf : nullptr, padded);
  if (io) std::memcpy(io + i, io_buf, rem * sizeof(float));
  if (wout) std::memcpy(wout + w, wout_buf, w_rem);
}

template <Kind K, class Op>
void DriveFormat(Compression c, const float* src, float* io, const uint8_t* win, uint8_t* wout,
                 size_t count) {
  switch (c) {
    case Compression::kBF16:
      return Drive<ElementChunk<BF16Format, K, Op>>(c, src, io, win, wout, count);
    case Compression::kF16:
      return Drive<ElementChunk<F16Format, K, Op>>(c, src, io, win, wout, count);
    case Compression::kInt8:
      return Drive<Int8Chunk<K, Op>>(c, src, io, win, wout, count);
    default:
      return Drive<ElementChunk<PlainFormat, K, Op>>(Compression::kNone, src, io, win, wout, count);
  }
}

void EncodeImpl(Compression c, const float* src, size_t count, uint8_t* dst) {
  DriveFormat<Kind::kEncode, OpSum>(c, src, nullptr, nullptr, dst, count);
}

void DecodeImpl(Compression c, const uint8_t* src, size_t count, float* dst) {
  DriveFormat<Kind::kDecode, OpSum>(c, nullptr, dst, src, nullptr, count);
}

void AccumulateImpl(Compression c, RedOp op, const uint8_t* src, size_t count, float* dst) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return DriveFormat<Kind::kAccumulate, OpSum>(c, nullptr, dst, src, nullptr, count);
    case RedOp::kProd:
      return DriveFormat<Kind::kAccumulate, OpProd>(c, nullptr, dst, src, nullptr, count);
    case RedOp::kMin:
      return DriveFormat<Kind::kAccumulate, OpMin>(c, nullptr, dst, src, nullptr, count);
    case RedOp::kMax:
      return DriveFormat<Kind::kAccumulate, OpMax>(c, nullptr, dst, src, nullptr, count);
    default:
      assert(!"wire_decode_accumulate: unknown op");
      return;
  }
}

void RoundTripImpl(Compression c, float* data, size_t count) {
  DriveFormat<Kind::kRoundTrip, OpSum>(c, nullptr, data, nullptr, nullptr, count);
}

void FeedbackImpl(Compression c, const float* src, float* residual, size_t count, uint8_t* dst) {
  DriveFormat<Kind::kFeedback, OpSum>(c, src, residual, nullptr, dst, count);
}

const char* TargetNameImpl() {
  return hwy::TargetName(HWY_TARGET);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace nodecomm::daemon::wire_kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nodecomm::daemon {

static_assert(std::endian::native == std::endian::little,
              "the wire formats are little-endian; big-endian hosts need byte swaps here");

namespace wire_kernels {
HWY_EXPORT(EncodeImpl);
HWY_EXPORT(DecodeImpl);
HWY_EXPORT(AccumulateImpl);
HWY_EXPORT(RoundTripImpl);
HWY_EXPORT(FeedbackImpl);
HWY_EXPORT(TargetNameImpl);
}  // namespace wire_kernels

namespace {
bool is_known(proto::Compression c) {
  return c == proto::Compression::kBF16 || c == proto::Compression::kF16 ||
         c == proto::Compression::kInt8;
}
}  // namespace

size_t wire_bytes(proto::Compression c, size_t count) {
  switch (c) {
    case proto::Compression::kBF16:
    case proto::Compression::kF16:
      return count * 2;
    case proto::Compression::kInt8:
      return (count + kInt8Block - 1) / kInt8Block * sizeof(float) + count;
    default:
      return count * sizeof(float);
  }
}

void wire_encode(proto::Compression c, const float* src, size_t count, void* dst) {
  if (count == 0) return;
  if (!is_known(c)) {
    std::memcpy(dst, src, count * sizeof(float));
    return;
  }
  HWY_DYNAMIC_DISPATCH(wire_kernels::EncodeImpl)(c, src, count, static_cast<uint8_t*>(dst));
}

void wire_decode(proto::Compression c, const void* src, size_t count, float* dst) {
  if (count == 0) return;
  if (!is_known(c)) {
    std::memcpy(dst, src, count * sizeof(float));
    return;
  }
  HWY_DYNAMIC_DISPATCH(wire_kernels::DecodeImpl)(c, static_cast<const uint8_t*>(src), count, dst);
}

void wire_decode_accumulate(proto::Compression c, proto::RedOp op, const void* src, size_t count,
                            float* dst) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(wire_kernels::AccumulateImpl)
  (c, op, static_cast<const uint8_t*>(src), count, dst);
}

void wire_round_trip(proto::Compression c, float* data, size_t count) {
  if (count == 0 || !is_known(c)) return;
  HWY_DYNAMIC_DISPATCH(wire_kernels::RoundTripImpl)(c, data, count);
}

void wire_encode_with_feedback(proto::Compression c, const float* src, float* residual,
                               size_t count, void* dst) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(wire_kernels::FeedbackImpl)
  (c, src, residual, count, static_cast<uint8_t*>(dst));
}

const char* wire_codec_target() {
  return HWY_DYNAMIC_DISPATCH(wire_kernels::TargetNameImpl)();
}

}  // namespace nodecomm::daemon
#endif  // HWY_ONCE
