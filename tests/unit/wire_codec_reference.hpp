// The scalar reference of the wire codec (wire_codec.hpp) that its tests compare the SIMD
// kernels against bit for bit: written independently, one element at a time.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "float_reference.hpp"
#include "nodecomm/proto/types.hpp"
#include "kernels/wire_codec.hpp"

namespace nodecomm::daemon::wire_reference {

using proto::Compression;
using proto::RedOp;

inline uint32_t Bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
inline float FromBits(uint32_t b) {
  return std::bit_cast<float>(b);
}
inline float Quiet(float f) {
  return FromBits(Bits(f) | 0x00400000u);
}

using test::RefRound;  // float_reference.hpp

inline uint16_t RefToBF16(float f) {
  const uint32_t b = Bits(f);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t a = b & 0x7FFFFFFF;
  if (a > 0x7F800000) return static_cast<uint16_t>((b >> 16) | 0x40);
  if (a == 0x7F800000) return sign | 0x7F80;
  if (a == 0) return sign;
  return static_cast<uint16_t>(sign | RefRound(a, 7, -126, 127, 0x7F80));
}

inline uint16_t RefToF16(float f) {
  const uint32_t b = Bits(f);
  const auto sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t a = b & 0x7FFFFFFF;
  if (a > 0x7F800000) return static_cast<uint16_t>(sign | 0x7E00 | ((a & 0x7FFFFF) >> 13));
  if (a == 0x7F800000) return sign | 0x7C00;
  if (a == 0) return sign;
  return static_cast<uint16_t>(sign | RefRound(a, 10, -14, 15, 0x7C00));
}

inline float RefFromBF16(uint16_t h) {
  return FromBits(static_cast<uint32_t>(h) << 16);
}

inline float RefFromF16(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  if (exp == 0x1F) {  // inf, or NaN made quiet with its payload kept
    return FromBits(sign | 0x7F800000u | (static_cast<uint32_t>(m) << 13) | (m ? 0x400000u : 0));
  }
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(m), -24)
                             : std::ldexp(static_cast<float>(1024 + m), exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

inline size_t RefWireBytes(Compression c, size_t n) {
  switch (c) {
    case Compression::kBF16:
    case Compression::kF16:
      return 2 * n;
    case Compression::kInt8:
      return n + 4 * ((n + 255) / 256);
    default:
      return 4 * n;
  }
}

inline std::vector<uint8_t> RefEncode(Compression c, const float* x, size_t n) {
  std::vector<uint8_t> out(RefWireBytes(c, n));
  if (c == Compression::kInt8) {
    uint8_t* p = out.data();
    for (size_t b = 0; b < n; b += 256) {
      const size_t m = std::min<size_t>(256, n - b);
      bool finite = true;
      float amax = 0;
      for (size_t i = 0; i < m; ++i) {
        finite = finite && std::isfinite(x[b + i]);
        amax = std::max(amax, std::fabs(x[b + i]));
      }
      const float scale = finite ? amax / 127.0f : FromBits(0x7FC00000u);
      std::memcpy(p, &scale, 4);
      for (size_t i = 0; i < m; ++i) {
        float q = 0;
        if (finite && scale > 0) q = std::clamp(std::nearbyint(x[b + i] / scale), -127.0f, 127.0f);
        p[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      }
      p += 4 + m;
    }
  } else if (c == Compression::kBF16 || c == Compression::kF16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = c == Compression::kBF16 ? RefToBF16(x[i]) : RefToF16(x[i]);
      out[2 * i] = static_cast<uint8_t>(h);
      out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
  } else if (n != 0) {
    std::memcpy(out.data(), x, 4 * n);
  }
  return out;
}

inline std::vector<float> RefDecode(Compression c, const uint8_t* w, size_t n) {
  std::vector<float> out(n);
  if (c == Compression::kInt8) {
    for (size_t b = 0; b < n; b += 256) {
      const size_t m = std::min<size_t>(256, n - b);
      float scale;
      std::memcpy(&scale, w, 4);
      for (size_t i = 0; i < m; ++i) {
        out[b + i] = static_cast<float>(static_cast<int8_t>(w[4 + i])) * scale;
      }
      w += 4 + m;
    }
  } else if (c == Compression::kBF16 || c == Compression::kF16) {
    for (size_t i = 0; i < n; ++i) {
      const auto h = static_cast<uint16_t>(w[2 * i] | (w[2 * i + 1] << 8));
      out[i] = c == Compression::kBF16 ? RefFromBF16(h) : RefFromF16(h);
    }
  } else if (n != 0) {
    std::memcpy(out.data(), w, 4 * n);
  }
  return out;
}

// The documented combine rules: dst's NaN first, then the decoded value's; ties keep dst.
inline float RefCombine(RedOp op, float a, float b) {
  if (std::isnan(a)) return Quiet(a);
  if (op == RedOp::kMin || op == RedOp::kMax) {
    if (std::isnan(b)) return Quiet(b);
    return (op == RedOp::kMin ? b < a : b > a) ? b : a;
  }
  if (std::isnan(b)) return Quiet(b);
  return op == RedOp::kProd ? a * b : a + b;
}

// Error feedback: returns the wire bytes, updates residual.
inline std::vector<uint8_t> RefFeedback(Compression c, const float* src, float* residual,
                                        size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = src[i] + residual[i];
  auto wire = RefEncode(c, v.data(), n);
  const auto back = RefDecode(c, wire.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const float r = v[i] - back[i];
    residual[i] = std::isfinite(r) ? r : 0.0f;
  }
  return wire;
}

}  // namespace nodecomm::daemon::wire_reference
