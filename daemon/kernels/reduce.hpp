#pragma once
#include <cstddef>
#include <cstdint>

#include "nodecomm/proto/types.hpp"
namespace nodecomm::daemon {
// NaN handling of float min/max and the behaviour on out-of-contract input (kAvg, integer
// divide_by, other dtypes) are documented at the top of reduce.cpp.
// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], for every DType and for RedOp kSum,
// kProd, kMin, kMax (kAvg is computed by callers as kSum followed by divide_by). n >= 1. dst may be
// the same pointer as any one src (exact aliasing only, no partial overlap). f16 and bf16 are
// widened to f32, combined in f32 and rounded once (round to nearest even) per element. Integer
// sum/prod wrap modulo 2^bits (no UB: use unsigned arithmetic).
void reduce(proto::DType dtype, proto::RedOp op, void* dst, const void* const* srcs, size_t n,
            size_t count);
// Same, but for f16/bf16 inputs writes the unrounded f32 result into dst_f32 (used before the
// inter-node stage so that rounding happens once at the very end). Only for kF16/kBF16.
void reduce_widen(proto::DType dtype, proto::RedOp op, float* dst_f32, const void* const* srcs,
                  size_t n, size_t count);
// f32 accumulator -> f16/bf16, round to nearest even (NaN stays NaN, overflow -> inf for f16).
void narrow_from_f32(proto::DType dtype, void* dst, const float* src, size_t count);
// dst[i] op= src[i] (two-input form, same semantics as reduce).
void accumulate(proto::DType dtype, proto::RedOp op, void* dst, const void* src, size_t count);
// dst[i] = dst[i] / divisor for floating dtypes (avg). f16/bf16: convert, divide in f32, round
// once.
void divide_by(proto::DType dtype, void* dst, size_t count, uint32_t divisor);
// Name of the SIMD target chosen at run time (e.g. "AVX2"), for logs.
const char* reduction_target();
}  // namespace nodecomm::daemon
