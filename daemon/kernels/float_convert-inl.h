// f16 / bf16 <-> f32 conversion kernels shared by reduce.cpp and wire_codec.cpp, as a Highway
// per-target header: include it after "hwy/highway.h" in the part of a file that
// hwy/foreach_target.h compiles once per target. The functions live in
// hwy::HWY_NAMESPACE::float_convert.
//
// All of them are integer bit manipulation or single IEEE operations in the default rounding mode
// (round to nearest even), so every target produces the same bits. None of them has a multiply
// feeding an add, so FMA contraction cannot change them; a file that turns contraction off
// (wire_codec.cpp) does so before including this header, and these functions inherit it.

// Per-target include guard: toggled by foreach_target.h for every target.
#if defined(NODECOMM_FLOAT_CONVERT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef NODECOMM_FLOAT_CONVERT_INL_H_
#undef NODECOMM_FLOAT_CONVERT_INL_H_
#else
#define NODECOMM_FLOAT_CONVERT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace hwy {
namespace HWY_NAMESPACE {
namespace float_convert {
namespace hn = hwy::HWY_NAMESPACE;

// On x86 targets with F16C, Highway's f16 PromoteTo/DemoteTo are single instructions
// (vcvtph2ps / vcvtps2ph with round-to-nearest-even). Below that (SSSE3, SSE4, scalar) Highway
// 1.0.3 emulates them incorrectly for our purposes: DemoteTo truncates instead of rounding and
// turns NaN/overflow into finite values, and PromoteTo turns inf/NaN into 65536. Those targets use
// the integer versions below instead, which reproduce F16C bit for bit (with kQuietNaN = true for
// the decoding).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
constexpr bool kHwF16 = true;
#else
constexpr bool kHwF16 = false;
#endif

// ------------------------------------------------------------------------------------------------
// f16 / bf16 <-> f32 on u32 lanes that hold the 16-bit pattern in their low half.

// Exact. With kQuietNaN, a signalling f16 NaN becomes a quiet f32 NaN (| 0x00400000), as
// vcvtph2ps does; without it, the payload is only shifted into place (a signalling NaN stays
// signalling).
template <bool kQuietNaN, class DF>
HWY_INLINE hn::Vec<DF> F16BitsToF32(DF df, hn::Vec<hn::RebindToUnsigned<DF>> h) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto sign = hn::ShiftLeft<16>(hn::And(h, hn::Set(du, 0x8000u)));
  const auto em = hn::And(h, hn::Set(du, 0x7FFFu));
  const auto shifted = hn::ShiftLeft<13>(em);
  // Rebias the exponent from 15 to 127; inf/NaN need the exponent field to end at 255 instead.
  const auto normal = hn::Add(shifted, hn::Set(du, 0x38000000u));
  const auto inf_nan = hn::Add(shifted, hn::Set(du, 0x70000000u));
  // Subnormals are m * 2^-24; both the int->float conversion and the scaling are exact.
  const auto sub = hn::BitCast(
      du, hn::Mul(hn::ConvertTo(df, hn::BitCast(di, em)), hn::Set(df, 5.9604644775390625e-08f)));
  const auto emi = hn::BitCast(di, em);
  const auto is_sub = hn::RebindMask(du, hn::Gt(hn::Set(di, 0x0400), emi));
  const auto is_inf_nan = hn::RebindMask(du, hn::Gt(emi, hn::Set(di, 0x7BFF)));
  auto mag = hn::IfThenElse(is_sub, sub, hn::IfThenElse(is_inf_nan, inf_nan, normal));
  if constexpr (kQuietNaN) {
    const auto is_nan = hn::RebindMask(du, hn::Gt(emi, hn::Set(di, 0x7C00)));
    mag = hn::IfThenElse(is_nan, hn::Or(mag, hn::Set(du, 0x00400000u)), mag);
  }
  return hn::BitCast(df, hn::Or(mag, sign));
}

// IEEE binary16, rounded to nearest even; magnitudes >= 65520 become inf, subnormals are kept. A
// NaN keeps its sign and the top 9 payload bits and is made quiet (| 0x0200), as vcvtps2ph does.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> F32ToF16Bits(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto sign = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 0x8000u));
  const auto mag = hn::And(bits, hn::Set(du, 0x7FFFFFFFu));
  const auto magi = hn::BitCast(di, mag);
  // Keep the top payload bits and force the quiet bit, as vcvtps2ph does.
  const auto nan =
      hn::Or(hn::Set(du, 0x7E00u), hn::ShiftRight<13>(hn::And(mag, hn::Set(du, 0x7FFFFFu))));
  // Normal range: rebias, then round to nearest even by adding 0xFFF plus the lowest kept bit.
  // A carry out of the mantissa correctly bumps the exponent. Unsigned wrap for small inputs is
  // harmless because those lanes are not selected.
  const auto odd = hn::And(hn::ShiftRight<13>(mag), hn::Set(du, 1u));
  const auto normal = hn::ShiftRight<13>(
      hn::Add(hn::Sub(mag, hn::Set(du, 0x38000000u)), hn::Add(hn::Set(du, 0xFFFu), odd)));
  // Below 2^-14: adding 0.5 makes the FPU round |v| to a multiple of 2^-24 (the f16 subnormal
  // step, which is also the f32 ulp of [0.5, 1)), leaving that multiple in the low mantissa bits.
  const auto sub =
      hn::Sub(hn::BitCast(du, hn::Add(hn::Abs(v), hn::Set(df, 0.5f))), hn::Set(du, 0x3F000000u));
  // 0x477FF000 is 65520, the tie between 65504 (max f16) and 2^16, which rounds to even = inf.
  const auto is_normal = hn::RebindMask(du, hn::Gt(magi, hn::Set(di, 0x387FFFFF)));
  const auto is_inf = hn::RebindMask(du, hn::Gt(magi, hn::Set(di, 0x477FEFFF)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(magi, hn::Set(di, 0x7F800000)));
  auto r = hn::IfThenElse(is_normal, normal, sub);
  r = hn::IfThenElse(is_inf, hn::Set(du, 0x7C00u), r);
  r = hn::IfThenElse(is_nan, nan, r);
  return hn::Or(r, sign);
}

// The upper half of the f32 pattern, rounded to nearest even; a NaN keeps its sign and the top 7
// payload bits and is made quiet (| 0x0040). Highway 1.0.3's DemoteTo(bf16) truncates (it keeps
// the upper 16 bits), so round here.
template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> F32ToBF16Bits(DF /*df*/, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(du, v);
  const auto upper = hn::ShiftRight<16>(bits);
  // Cannot wrap for non-NaN inputs: the largest is 0xFF800000 (-inf) + 0x8000.
  const auto rounded = hn::ShiftRight<16>(
      hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), hn::And(upper, hn::Set(du, 1u)))));
  // Rounding could carry a NaN payload into inf, so NaNs keep their top bits and get quietened.
  const auto is_nan = hn::RebindMask(
      du,
      hn::Gt(hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu))), hn::Set(di, 0x7F800000)));
  return hn::IfThenElse(is_nan, hn::Or(upper, hn::Set(du, 0x40u)), rounded);
}

// Exact: the bf16 pattern becomes the upper half of the f32 pattern.
template <class DF>
HWY_INLINE hn::Vec<DF> BF16BitsToF32(DF df, hn::Vec<hn::RebindToUnsigned<DF>> h) {
  return hn::BitCast(df, hn::ShiftLeft<16>(h));
}

}  // namespace float_convert
}  // namespace HWY_NAMESPACE
}  // namespace hwy
HWY_AFTER_NAMESPACE();

#endif  // NODECOMM_FLOAT_CONVERT_INL_H_
