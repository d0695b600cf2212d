// Placeholder scalar implementation; replaced by the Highway kernels.
#include "wire_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace nodecomm::daemon {
namespace {
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t to_f16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float from_f16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
}  // namespace

size_t wire_bytes(proto::Compression c, size_t count) {
  switch (c) {
    case proto::Compression::kBF16:
    case proto::Compression::kF16:
      return count * 2;
    case proto::Compression::kInt8:
      return (count + kInt8Block - 1) / kInt8Block * 4 + count;
    default:
      return count * 4;
  }
}

void wire_encode(proto::Compression c, const float* src, size_t count, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  if (c == proto::Compression::kNone) {
    std::memcpy(dst, src, count * 4);
  } else if (c == proto::Compression::kInt8) {
    for (size_t b = 0; b < count; b += kInt8Block) {
      const size_t n = std::min(kInt8Block, count - b);
      float amax = 0;
      for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[b + i]));
      const float scale = amax / 127.0f;
      std::memcpy(out, &scale, 4);
      out += 4;
      for (size_t i = 0; i < n; ++i) {
        const float q = scale > 0 ? std::nearbyint(src[b + i] / scale) : 0.0f;
        out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
      }
      out += n;
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = c == proto::Compression::kBF16 ? to_bf16(src[i]) : to_f16(src[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

void wire_decode(proto::Compression c, const void* src, size_t count, float* dst) {
  const auto* in = static_cast<const uint8_t*>(src);
  if (c == proto::Compression::kNone) {
    std::memcpy(dst, src, count * 4);
  } else if (c == proto::Compression::kInt8) {
    for (size_t b = 0; b < count; b += kInt8Block) {
      const size_t n = std::min(kInt8Block, count - b);
      float scale;
      std::memcpy(&scale, in, 4);
      in += 4;
      for (size_t i = 0; i < n; ++i) dst[b + i] = static_cast<float>(static_cast<int8_t>(in[i])) * scale;
      in += n;
    }
  } else {
    for (size_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      dst[i] = c == proto::Compression::kBF16 ? from_bf16(h) : from_f16(h);
    }
  }
}

void wire_decode_accumulate(proto::Compression c, proto::RedOp op, const void* src, size_t count,
                            float* dst) {
  std::vector<float> tmp(count);
  wire_decode(c, src, count, tmp.data());
  for (size_t i = 0; i < count; ++i) {
    if (op == proto::RedOp::kMin) {
      dst[i] = std::min(dst[i], tmp[i]);
    } else if (op == proto::RedOp::kMax) {
      dst[i] = std::max(dst[i], tmp[i]);
    } else {
      dst[i] += tmp[i];
    }
  }
}

void wire_round_trip(proto::Compression c, float* data, size_t count) {
  std::vector<uint8_t> tmp(wire_bytes(c, count));
  wire_encode(c, data, count, tmp.data());
  wire_decode(c, tmp.data(), count, data);
}

void wire_encode_with_feedback(proto::Compression c, const float* src, float* residual,
                               size_t count, void* dst) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = src[i] + residual[i];
  wire_encode(c, v.data(), count, dst);
  std::vector<float> back(count);
  wire_decode(c, dst, count, back.data());
  for (size_t i = 0; i < count; ++i) residual[i] = v[i] - back[i];
}

const char* wire_codec_target() { return "scalar"; }

}  // namespace nodecomm::daemon
