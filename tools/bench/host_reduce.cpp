#include "host_reduce.hpp"

#include <algorithm>

namespace nodecomm::bench {
namespace {

template <class T>
T apply(nc_redop_t op, T x, T y) {
  switch (op) {
    case NC_PROD:
      return static_cast<T>(x * y);
    case NC_MIN:
      return std::min(x, y);
    case NC_MAX:
      return std::max(x, y);
    case NC_SUM:
    case NC_AVG:
      break;
  }
  return static_cast<T>(x + y);
}

template <class T>
void combine_as(nc_redop_t op, void* out, const void* a, const void* b, size_t count) {
  // Through locals, element by element: out may alias a or b.
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) po[i] = apply<T>(op, pa[i], pb[i]);
}

template <uint16_t (*Narrow)(float), float (*Widen)(uint16_t)>
void combine_half(nc_redop_t op, void* out, const void* a, const void* b, size_t count) {
  const auto* pa = static_cast<const uint16_t*>(a);
  const auto* pb = static_cast<const uint16_t*>(b);
  auto* po = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < count; ++i) po[i] = Narrow(apply<float>(op, Widen(pa[i]), Widen(pb[i])));
}

template <class T>
void divide(void* data, size_t count, int n) {
  T* p = static_cast<T*>(data);
  const T divisor = static_cast<T>(n);
  for (size_t i = 0; i < count; ++i) p[i] /= divisor;
}

template <uint16_t (*Narrow)(float), float (*Widen)(uint16_t)>
void divide_half(void* data, size_t count, int n) {
  auto* p = static_cast<uint16_t*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = Narrow(Widen(p[i]) / static_cast<float>(n));
}

}  // namespace

void combine(nc_dtype_t dtype, nc_redop_t op, void* out, const void* a, const void* b,
             size_t count) {
  switch (dtype) {
    case NC_F32:
      return combine_as<float>(op, out, a, b, count);
    case NC_F64:
      return combine_as<double>(op, out, a, b, count);
    case NC_I32:
      return combine_as<int32_t>(op, out, a, b, count);
    case NC_I64:
      return combine_as<int64_t>(op, out, a, b, count);
    case NC_I8:
      return combine_as<int8_t>(op, out, a, b, count);
    case NC_U8:
      return combine_as<uint8_t>(op, out, a, b, count);
    case NC_F16:
      return combine_half<f32_to_f16, f16_to_f32>(op, out, a, b, count);
    case NC_BF16:
      return combine_half<f32_to_bf16, bf16_to_f32>(op, out, a, b, count);
  }
}

void divide_average(void* data, size_t count, nc_dtype_t dtype, int n) {
  switch (dtype) {
    case NC_F32:
      return divide<float>(data, count, n);
    case NC_F64:
      return divide<double>(data, count, n);
    case NC_F16:
      return divide_half<f32_to_f16, f16_to_f32>(data, count, n);
    case NC_BF16:
      return divide_half<f32_to_bf16, bf16_to_f32>(data, count, n);
    default:
      return;  // rejected up front (the backends' reject())
  }
}

}  // namespace nodecomm::bench
