// How f32 allreduce data is compressed on the wire between nodes (proto::Compression):
//   bf16 / f16: 2 bytes per element, round to nearest even; the receiver accumulates in f32;
//   int8:       blocks of kInt8Block elements, each a f32 scale (max |x| / 127) followed by
//               kInt8Block int8 values round(x / scale); error feedback keeps what rounding lost.
// Encoded buffers are plain bytes with no alignment requirement beyond 1.
// Every SIMD target produces the same bits. Non-finite input: bf16/f16 keep inf and NaN (f16
// overflow gives inf); an int8 block holding an inf or NaN is sent as scale NaN with all q = 0, so
// the whole block decodes to NaN. The full rules (NaN in min/max, error feedback) are at the top of
// wire_codec.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nodecomm/proto/types.hpp"

namespace nodecomm::daemon {

inline constexpr size_t kInt8Block = 256;

// Bytes `count` f32 elements take on the wire (count * 4 for kNone).
size_t wire_bytes(proto::Compression c, size_t count);
// dst (wire_bytes(c, count) bytes) = encode(src).
void wire_encode(proto::Compression c, const float* src, size_t count, void* dst);
// dst = decode(src).
void wire_decode(proto::Compression c, const void* src, size_t count, float* dst);
// dst[i] = dst[i] op decode(src)[i], for op sum, min or max.
void wire_decode_accumulate(proto::Compression c, proto::RedOp op, const void* src, size_t count,
                            float* dst);
// data = decode(encode(data)): what every node ends up with when `data` is sent.
void wire_round_trip(proto::Compression c, float* data, size_t count);
// Error feedback: v = src + residual; dst = encode(v); residual = v - decode(dst).
// Where v - decode(dst) is not finite the residual becomes 0, so one inf/NaN step does not poison
// later ones. src may be the same pointer as residual.
void wire_encode_with_feedback(proto::Compression c, const float* src, float* residual,
                               size_t count, void* dst);
// Name of the SIMD target chosen at run time, for logs.
const char* wire_codec_target();

}  // namespace nodecomm::daemon
