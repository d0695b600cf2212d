#include "nodecomm/ipc/validate.hpp"

#include <fmt/format.h>

namespace nodecomm::ipc {

using proto::Status;

std::string tensor_name(const proto::OpDescriptor& d) {
  std::string out;
  for (char c : d.name) {
    if (c == '\0') break;
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

namespace {
Verdict reject(Status s, std::string message) {
  return Verdict{s, std::move(message)};
}

// [offset, offset + bytes) inside [0, arena) without overflow, naturally aligned.
Verdict check_buffer(const char* which, uint64_t offset, uint64_t bytes, uint64_t elem,
                     uint64_t arena) {
  if (offset > arena || bytes > arena - offset) {
    return reject(Status::kOutOfRange,
                  fmt::format("{} buffer [offset {}, +{} bytes) lies outside the {}-byte arena",
                              which, offset, bytes, arena));
  }
  if (elem != 0 && offset % elem != 0) {
    return reject(Status::kInvalidArgument,
                  fmt::format("{} buffer offset {} is not aligned to the {}-byte element", which,
                              offset, elem));
  }
  return {};
}
}  // namespace

Verdict validate_descriptor(const proto::OpDescriptor& d, const ValidationLimits& limits) {
  if (d.collective >= static_cast<uint16_t>(proto::Collective::kCount)) {
    return reject(Status::kInvalidArgument, fmt::format("unknown collective {}", d.collective));
  }
  if (d.dtype >= static_cast<uint8_t>(proto::DType::kCount)) {
    return reject(Status::kInvalidArgument, fmt::format("unknown dtype {}", d.dtype));
  }
  if (d.redop >= static_cast<uint8_t>(proto::RedOp::kCount)) {
    return reject(Status::kInvalidArgument, fmt::format("unknown reduction op {}", d.redop));
  }
  if (static_cast<proto::RedOp>(d.redop) == proto::RedOp::kAvg &&
      !proto::dtype_is_float(static_cast<proto::DType>(d.dtype))) {
    return reject(Status::kInvalidArgument,
                  fmt::format("reduction op avg needs a floating dtype, got {}",
                              proto::dtype_name(static_cast<proto::DType>(d.dtype))));
  }
  if ((d.flags & ~proto::kOpFlagInPlace) != 0 || d.reserved != 0) {
    return reject(
        Status::kInvalidArgument,
        fmt::format("unknown flags {:#x} or non-zero reserved field {}", d.flags, d.reserved));
  }
  if (d.seq == 0) return reject(Status::kInvalidArgument, "sequence number 0 (they start at 1)");
  if (d.count > limits.max_count) {
    return reject(Status::kInvalidArgument,
                  fmt::format("count {} exceeds the limit {}", d.count, limits.max_count));
  }
  const uint64_t elem = proto::dtype_size(static_cast<proto::DType>(d.dtype));
  const uint64_t bytes = d.count * elem;  // cannot overflow: max_count * 8 < 2^64
  if (Verdict v = check_buffer("send", d.send_offset, bytes, elem, limits.arena_bytes); !v.ok()) {
    return v;
  }
  if (Verdict v = check_buffer("receive", d.recv_offset, bytes, elem, limits.arena_bytes);
      !v.ok()) {
    return v;
  }
  const bool in_place = (d.flags & proto::kOpFlagInPlace) != 0;
  if (in_place && d.send_offset != d.recv_offset) {
    return reject(Status::kInvalidArgument,
                  fmt::format("in-place flag set but send offset {} != receive offset {}",
                              d.send_offset, d.recv_offset));
  }
  if (!in_place && bytes > 0 && d.send_offset < d.recv_offset + bytes &&
      d.recv_offset < d.send_offset + bytes) {
    return reject(Status::kInvalidArgument,
                  fmt::format("send [{}, +{}) and receive [{}, +{}) overlap without the in-place "
                              "flag",
                              d.send_offset, bytes, d.recv_offset, bytes));
  }
  return {};
}

}  // namespace nodecomm::ipc
