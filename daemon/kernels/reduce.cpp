// Element-wise reduction kernels for the daemon, compiled once per SIMD target by Google Highway
// and dispatched at run time, so one binary runs everywhere and still uses AVX2/AVX-512 where the
// CPU has it (never -march=native).
//
// This file includes itself once per target through hwy/foreach_target.h. HWY_TARGET_INCLUDE is
// resolved like any other #include, so the directory holding this file (daemon/) must be on the
// include path of whatever target compiles it.
//
// Behaviour the header does not spell out:
//  - Float min/max use Highway Min/Max as they are. With a NaN among the inputs the result is
//    target dependent: x86 SIMD targets (minps/maxps return the second operand if either is NaN)
//    give NaN exactly when srcs[n-1][i] is NaN, while the HWY_SCALAR target prefers the non-NaN
//    operand. Only "every input NaN gives NaN" holds everywhere. Min/max of +0 and -0 may return
//    either zero.
//  - reduce()/accumulate() treat kAvg as kSum (the summing stage of an average).
//  - divide_by() on integer dtypes divides with C++ semantics (truncation toward zero); a zero
//    divisor leaves integer data untouched rather than trapping.
//  - reduce_widen() also accepts kF32 (plain reduce); narrow_from_f32() accepts kF32 (a copy).
//  - Unknown dtypes/ops and other out-of-contract calls are no-ops (assert in debug builds).
//  - The software f16 path (float_convert-inl.h) relies on the default rounding mode (round to
//  nearest even), as
//    does f32 arithmetic in general; the F16C path always rounds to nearest even.

#include "kernels/reduce.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <type_traits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Per target, like this file.
#include "float_convert-inl.h"

HWY_BEFORE_NAMESPACE();
namespace nodecomm::daemon {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using proto::DType;
using proto::RedOp;

// Highway 1.0.3 has a vector multiply for 64-bit lanes on x86 only with AVX-512DQ (HWY_AVX3 and
// above); HWY_SCALAR/HWY_EMU128 emulate it. Elsewhere i64 prod takes a scalar loop.
#if (HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3) || HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
constexpr bool kVecMul64 = true;
#else
constexpr bool kVecMul64 = false;
#endif

// f16 / bf16 <-> f32 conversions (float_convert-inl.h). kHwF16: Highway's own f16 PromoteTo /
// DemoteTo are right on this target (F16C); elsewhere the integer conversions are used.
using hn::float_convert::BF16BitsToF32;
using hn::float_convert::F16BitsToF32;
using hn::float_convert::F32ToBF16Bits;
using hn::float_convert::F32ToF16Bits;
using hn::float_convert::kHwF16;

// ------------------------------------------------------------------------------------------------
// Codecs: how a storage type is loaded into / stored from the compute vector type D.

template <typename T>
struct PlainIO {
  using Storage = T;
  template <class D>
  static HWY_INLINE hn::Vec<D> Load(D d, const T* p) {
    return hn::LoadU(d, p);
  }
  template <class D>
  static HWY_INLINE void Store(D d, hn::Vec<D> v, T* p) {
    hn::StoreU(v, d, p);
  }
};

// Values ranging in [0, 0xFFFF] in u32 lanes -> u16 vector. The saturating signed->unsigned
// DemoteTo is exact for that range and exists on every target in 1.0.3.
template <class DF>
HWY_INLINE void StoreLow16(DF /*df*/, hn::Vec<hn::RebindToUnsigned<DF>> bits, uint16_t* p) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> dh;
  hn::StoreU(hn::DemoteTo(dh, hn::BitCast(di, bits)), dh, p);
}

template <class DF>
HWY_INLINE hn::Vec<hn::RebindToUnsigned<DF>> LoadLow16(DF /*df*/, const uint16_t* p) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint16_t, DF> dh;
  return hn::PromoteTo(du, hn::LoadU(dh, p));
}

struct F16IO {
  using Storage = uint16_t;
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint16_t* p) {
    if constexpr (kHwF16) {
      const hn::Rebind<hwy::float16_t, DF> dh;
      return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
    } else {
      return F16BitsToF32</*kQuietNaN=*/false>(df, LoadLow16(df, p));
    }
  }
  template <class DF>
  static HWY_INLINE void Store(DF df, hn::Vec<DF> v, uint16_t* p) {
    if constexpr (kHwF16) {
      const hn::Rebind<hwy::float16_t, DF> dh;
      hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
    } else {
      StoreLow16(df, F32ToF16Bits(df, v), p);
    }
  }
};

struct BF16IO {
  using Storage = uint16_t;
  template <class DF>
  static HWY_INLINE hn::Vec<DF> Load(DF df, const uint16_t* p) {
    return BF16BitsToF32(df, LoadLow16(df, p));
  }
  template <class DF>
  static HWY_INLINE void Store(DF df, hn::Vec<DF> v, uint16_t* p) {
    StoreLow16(df, F32ToBF16Bits(df, v), p);
  }
};

// ------------------------------------------------------------------------------------------------
// Combining operations and the final per-vector step.

struct OpSum {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Add(a, b);
  }
};
struct OpProd {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Mul(a, b);
  }
};
// Highway 1.0.3 has no multiply for 8-bit lanes on any SIMD target, so build one from 16-bit
// multiplies: the low byte of a product depends only on the low bytes of the factors. (A scalar
// loop, which GCC 12 did not vectorise, ran i8 prod about 7x slower.)
struct OpProd8 {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
#if HWY_TARGET == HWY_SCALAR
    return hn::Mul(a, b);  // one lane; Vec1 multiplies any lane type
#else
    const hn::DFromV<V> d8;
    const hn::Repartition<uint16_t, decltype(d8)> d16;
    const auto a16 = hn::BitCast(d16, a);
    const auto b16 = hn::BitCast(d16, b);
    const auto lo = hn::And(hn::Mul(a16, b16), hn::Set(d16, 0x00FF));
    // (a >> 8) * (b & 0xFF00) is the product of the high bytes, already shifted into place.
    const auto hi = hn::Mul(hn::ShiftRight<8>(a16), hn::And(b16, hn::Set(d16, 0xFF00)));
    return hn::BitCast(d8, hn::Or(lo, hi));
#endif
  }
};
struct OpMin {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Min(a, b);
  }
};
struct OpMax {
  template <class V>
  static HWY_INLINE V Apply(V a, V b) {
    return hn::Max(a, b);
  }
};

struct Identity {
  template <class D>
  HWY_INLINE hn::Vec<D> operator()(D /*d*/, hn::Vec<D> v) const {
    return v;
  }
};

template <typename T>
struct DivideBy {
  T divisor;
  template <class D>
  HWY_INLINE hn::Vec<D> operator()(D d, hn::Vec<D> v) const {
    return hn::Div(v, hn::Set(d, divisor));
  }
};

// One pass over memory: for each vector position, load srcs[0], fold in srcs[1..n-1] in order,
// apply `fin`, store. Every source is read at position i before dst is written at i, which is
// what makes exact aliasing of dst with any one source safe.
template <class D, class In, class Out, class Op, class Fin>
HWY_INLINE void Transform(D d, void* dst, const void* const* srcs, size_t n, size_t count,
                          const Fin& fin) {
  using TI = typename In::Storage;
  using TO = typename Out::Storage;
  const auto src = [srcs](size_t s) { return static_cast<const TI*>(srcs[s]); };
  TO* const out = static_cast<TO*>(dst);
  const size_t lanes = hn::Lanes(d);

  size_t i = 0;
  if (count >= lanes) {
    for (; i <= count - lanes; i += lanes) {
      auto acc = In::Load(d, src(0) + i);
      for (size_t s = 1; s < n; ++s) acc = Op::Apply(acc, In::Load(d, src(s) + i));
      Out::Store(d, fin(d, acc), out + i);
    }
  }
  if (i == count) return;

  // The tail goes through stack buffers so that it runs the very same vector code as the body
  // (identical rounding and NaN behaviour) without touching memory past `count`. Highway 1.0.3
  // has no LoadN, and its MaskedLoad for 8/16-bit lanes below AVX-512 reads the whole vector.
  const size_t rem = count - i;
  constexpr size_t kMaxLanes = hn::MaxLanes(D());
  TI in_buf[kMaxLanes] = {};
  TO out_buf[kMaxLanes] = {};
  std::memcpy(in_buf, src(0) + i, rem * sizeof(TI));
  auto acc = In::Load(d, in_buf);
  for (size_t s = 1; s < n; ++s) {
    std::memcpy(in_buf, src(s) + i, rem * sizeof(TI));
    acc = Op::Apply(acc, In::Load(d, in_buf));
  }
  Out::Store(d, fin(d, acc), out_buf);
  std::memcpy(out + i, out_buf, rem * sizeof(TO));
}

// Scalar product for 64-bit lanes on targets without a vector multiply for them (kVecMul64).
// Blocked through a local accumulator so each source is still streamed once and dst may alias.
template <typename U>
void ProdScalar(void* dst, const void* const* srcs, size_t n, size_t count) {
  static_assert(std::is_unsigned_v<U>, "wrap-around must not be UB");
  constexpr size_t kBlock = 512;
  U acc[kBlock];
  for (size_t i = 0; i < count; i += kBlock) {
    const size_t m = std::min(kBlock, count - i);
    std::memcpy(acc, static_cast<const U*>(srcs[0]) + i, m * sizeof(U));
    for (size_t s = 1; s < n; ++s) {
      const U* p = static_cast<const U*>(srcs[s]) + i;
      for (size_t j = 0; j < m; ++j) acc[j] = static_cast<U>(acc[j] * p[j]);
    }
    std::memcpy(static_cast<U*>(dst) + i, acc, m * sizeof(U));
  }
}

template <typename T, class Op>
HWY_INLINE void ReducePlain(void* dst, const void* const* srcs, size_t n, size_t count) {
  const hn::ScalableTag<T> d;
  Transform<decltype(d), PlainIO<T>, PlainIO<T>, Op>(d, dst, srcs, n, count, Identity());
}

// Sum and prod run on the unsigned type of the same width, so wrap-around is defined behaviour
// even on the HWY_SCALAR target (which computes with plain C++ operators); min/max need the
// signedness of the dtype.
template <typename S, class Op>
void ReduceInt(void* dst, const void* const* srcs, size_t n, size_t count) {
  using U = std::make_unsigned_t<S>;
  if constexpr (std::is_same_v<Op, OpProd>) {
    if constexpr (sizeof(U) == 1) {
      ReducePlain<U, OpProd8>(dst, srcs, n, count);
    } else if constexpr (sizeof(U) == 8 && !kVecMul64) {
      ProdScalar<U>(dst, srcs, n, count);
    } else {
      ReducePlain<U, Op>(dst, srcs, n, count);
    }
  } else if constexpr (std::is_same_v<Op, OpSum>) {
    ReducePlain<U, Op>(dst, srcs, n, count);
  } else {
    ReducePlain<S, Op>(dst, srcs, n, count);
  }
}

template <class In, class Out, class Op>
HWY_INLINE void ReduceHalf(void* dst, const void* const* srcs, size_t n, size_t count) {
  const hn::ScalableTag<float> df;
  Transform<decltype(df), In, Out, Op>(df, dst, srcs, n, count, Identity());
}

template <class Op>
void ReduceOp(DType dtype, void* dst, const void* const* srcs, size_t n, size_t count) {
  switch (dtype) {
    case DType::kF32:
      return ReducePlain<float, Op>(dst, srcs, n, count);
    case DType::kF64:
      return ReducePlain<double, Op>(dst, srcs, n, count);
    case DType::kF16:
      return ReduceHalf<F16IO, F16IO, Op>(dst, srcs, n, count);
    case DType::kBF16:
      return ReduceHalf<BF16IO, BF16IO, Op>(dst, srcs, n, count);
    case DType::kI32:
      return ReduceInt<int32_t, Op>(dst, srcs, n, count);
    case DType::kI64:
      return ReduceInt<int64_t, Op>(dst, srcs, n, count);
    case DType::kI8:
      return ReduceInt<int8_t, Op>(dst, srcs, n, count);
    case DType::kU8:
      return ReduceInt<uint8_t, Op>(dst, srcs, n, count);
    default:
      assert(!"reduce: unknown dtype");
      return;
  }
}

void ReduceImpl(DType dtype, RedOp op, void* dst, const void* const* srcs, size_t n, size_t count) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return ReduceOp<OpSum>(dtype, dst, srcs, n, count);
    case RedOp::kProd:
      return ReduceOp<OpProd>(dtype, dst, srcs, n, count);
    case RedOp::kMin:
      return ReduceOp<OpMin>(dtype, dst, srcs, n, count);
    case RedOp::kMax:
      return ReduceOp<OpMax>(dtype, dst, srcs, n, count);
    default:
      assert(!"reduce: unknown op");
      return;
  }
}

template <class In, class Op>
void WidenOp(float* dst, const void* const* srcs, size_t n, size_t count) {
  ReduceHalf<In, PlainIO<float>, Op>(dst, srcs, n, count);
}

template <class In>
void WidenIn(RedOp op, float* dst, const void* const* srcs, size_t n, size_t count) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return WidenOp<In, OpSum>(dst, srcs, n, count);
    case RedOp::kProd:
      return WidenOp<In, OpProd>(dst, srcs, n, count);
    case RedOp::kMin:
      return WidenOp<In, OpMin>(dst, srcs, n, count);
    case RedOp::kMax:
      return WidenOp<In, OpMax>(dst, srcs, n, count);
    default:
      assert(!"reduce_widen: unknown op");
      return;
  }
}

void ReduceWidenImpl(DType dtype, RedOp op, float* dst, const void* const* srcs, size_t n,
                     size_t count) {
  switch (dtype) {
    case DType::kF16:
      return WidenIn<F16IO>(op, dst, srcs, n, count);
    case DType::kBF16:
      return WidenIn<BF16IO>(op, dst, srcs, n, count);
    case DType::kF32:
      return WidenIn<PlainIO<float>>(op, dst, srcs, n, count);
    default:
      assert(!"reduce_widen: dtype must be f16 or bf16");
      return;
  }
}

void NarrowImpl(DType dtype, void* dst, const float* src, size_t count) {
  const hn::ScalableTag<float> df;
  const void* srcs[1] = {src};
  switch (dtype) {
    case DType::kF16:
      return Transform<decltype(df), PlainIO<float>, F16IO, OpSum>(df, dst, srcs, 1, count,
                                                                   Identity());
    case DType::kBF16:
      return Transform<decltype(df), PlainIO<float>, BF16IO, OpSum>(df, dst, srcs, 1, count,
                                                                    Identity());
    case DType::kF32:
      if (dst != src) std::memcpy(dst, src, count * sizeof(float));
      return;
    default:
      assert(!"narrow_from_f32: dtype must be f16 or bf16");
      return;
  }
}

// Truncating integer division; nobody should average integers, but doing something well defined
// beats silently leaving the sum in place.
template <typename S>
void DivideInt(void* dst, size_t count, uint32_t divisor) {
  if (divisor == 0) return;
  // Divide in int64 so the unsigned divisor does not turn the division unsigned.
  const int64_t div = divisor;
  S* p = static_cast<S*>(dst);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<S>(static_cast<int64_t>(p[i]) / div);
}

void DivideImpl(DType dtype, void* dst, size_t count, uint32_t divisor) {
  const void* srcs[1] = {dst};
  const hn::ScalableTag<float> df;
  const hn::ScalableTag<double> dd;
  const DivideBy<float> fdiv{static_cast<float>(divisor)};
  switch (dtype) {
    case DType::kF32:
      return Transform<decltype(df), PlainIO<float>, PlainIO<float>, OpSum>(df, dst, srcs, 1, count,
                                                                            fdiv);
    case DType::kF64:
      return Transform<decltype(dd), PlainIO<double>, PlainIO<double>, OpSum>(
          dd, dst, srcs, 1, count, DivideBy<double>{static_cast<double>(divisor)});
    case DType::kF16:
      return Transform<decltype(df), F16IO, F16IO, OpSum>(df, dst, srcs, 1, count, fdiv);
    case DType::kBF16:
      return Transform<decltype(df), BF16IO, BF16IO, OpSum>(df, dst, srcs, 1, count, fdiv);
    case DType::kI32:
      return DivideInt<int32_t>(dst, count, divisor);
    case DType::kI64:
      return DivideInt<int64_t>(dst, count, divisor);
    case DType::kI8:
      return DivideInt<int8_t>(dst, count, divisor);
    case DType::kU8:
      return DivideInt<uint8_t>(dst, count, divisor);
    default:
      assert(!"divide_by: unknown dtype");
      return;
  }
}

const char* TargetNameImpl() {
  return hwy::TargetName(HWY_TARGET);
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace nodecomm::daemon
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace nodecomm::daemon {

HWY_EXPORT(ReduceImpl);
HWY_EXPORT(ReduceWidenImpl);
HWY_EXPORT(NarrowImpl);
HWY_EXPORT(DivideImpl);
HWY_EXPORT(TargetNameImpl);

void reduce(proto::DType dtype, proto::RedOp op, void* dst, const void* const* srcs, size_t n,
            size_t count) {
  if (n == 0 || count == 0) return;
  HWY_DYNAMIC_DISPATCH(ReduceImpl)(dtype, op, dst, srcs, n, count);
}

void reduce_widen(proto::DType dtype, proto::RedOp op, float* dst_f32, const void* const* srcs,
                  size_t n, size_t count) {
  if (n == 0 || count == 0) return;
  HWY_DYNAMIC_DISPATCH(ReduceWidenImpl)(dtype, op, dst_f32, srcs, n, count);
}

void narrow_from_f32(proto::DType dtype, void* dst, const float* src, size_t count) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(NarrowImpl)(dtype, dst, src, count);
}

void accumulate(proto::DType dtype, proto::RedOp op, void* dst, const void* src, size_t count) {
  const void* srcs[2] = {dst, src};
  reduce(dtype, op, dst, srcs, 2, count);
}

void divide_by(proto::DType dtype, void* dst, size_t count, uint32_t divisor) {
  if (count == 0) return;
  HWY_DYNAMIC_DISPATCH(DivideImpl)(dtype, dst, count, divisor);
}

const char* reduction_target() {
  return HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
}

}  // namespace nodecomm::daemon
#endif  // HWY_ONCE
