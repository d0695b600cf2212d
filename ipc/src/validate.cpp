#include "nodecomm/ipc/validate.hpp"

#include <fmt/format.h>

#include <algorithm>

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

// [offset, offset + bytes) inside [0, arena), or inside one registered region, without
// overflow, naturally aligned.
Verdict check_buffer(const char* which, uint64_t offset, uint64_t bytes, uint64_t elem,
                     const ValidationLimits& limits) {
  const int64_t region = proto::region_of(offset);
  if (region < 0) {
    const uint64_t arena = limits.arena_bytes;
    if (offset > arena || bytes > arena - offset) {
      return reject(Status::kOutOfRange,
                    fmt::format("{} buffer [offset {}, +{} bytes) lies outside the {}-byte arena",
                                which, offset, bytes, arena));
    }
  } else {
    const uint64_t within = offset & proto::kRegionOffsetMask;
    if (region >= limits.region_count || limits.region_bytes == nullptr) {
      return reject(Status::kOutOfRange,
                    fmt::format("{} buffer names registered region {}, and {} region(s) are "
                                "registered",
                                which, region, limits.region_count));
    }
    const uint64_t size = limits.region_bytes[region];
    if (within > size || bytes > size - within) {
      return reject(Status::kOutOfRange,
                    fmt::format("{} buffer [offset {}, +{} bytes) of registered region {} lies "
                                "outside its {} bytes",
                                which, within, bytes, region, size));
    }
  }
  if (elem != 0 && offset % elem != 0) {
    return reject(Status::kInvalidArgument,
                  fmt::format("{} buffer offset {} is not aligned to the {}-byte element", which,
                              offset, elem));
  }
  return {};
}
}  // namespace

// Wire compression is for f32 gradients: allreduce only; int8 with error feedback only sums.
Verdict check_compression(const proto::OpDescriptor& d) {
  if (d.compression >= static_cast<uint8_t>(proto::Compression::kCount)) {
    return reject(Status::kInvalidArgument, fmt::format("unknown compression {}", d.compression));
  }
  const auto c = static_cast<proto::Compression>(d.compression);
  if (c == proto::Compression::kNone) return {};
  const auto op = static_cast<proto::RedOp>(d.redop);
  const std::string_view name = proto::compression_name(c);
  if (static_cast<proto::Collective>(d.collective) != proto::Collective::kAllreduce ||
      static_cast<proto::DType>(d.dtype) != proto::DType::kF32) {
    return reject(Status::kUnsupported,
                  fmt::format("compression {} is for f32 allreduce only, got {} {}", name,
                              proto::collective_name(static_cast<proto::Collective>(d.collective)),
                              proto::dtype_name(static_cast<proto::DType>(d.dtype))));
  }
  const bool sums = op == proto::RedOp::kSum || op == proto::RedOp::kAvg;
  if (op == proto::RedOp::kProd || (c == proto::Compression::kInt8 && !sums)) {
    return reject(Status::kUnsupported,
                  fmt::format("compression {} does not support reduction op {}", name,
                              proto::redop_name(op)));
  }
  return {};
}

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
  const bool reserved_clear = d.reserved[0] == 0 && d.reserved[1] == 0 && d.reserved[2] == 0;
  if ((d.flags & ~proto::kOpFlagInPlace) != 0 || !reserved_clear) {
    return reject(Status::kInvalidArgument,
                  fmt::format("unknown flags {:#x} or non-zero reserved bytes", d.flags));
  }
  if (Verdict v = check_compression(d); !v.ok()) return v;
  if (d.seq == 0) return reject(Status::kInvalidArgument, "sequence number 0 (they start at 1)");
  if (static_cast<proto::Collective>(d.collective) == proto::Collective::kCommSplit) {
    // count carries the key and root the color; no buffers, nothing else to check.
    return {};
  }
  if (d.count > limits.max_count) {
    Verdict v = reject(Status::kInvalidArgument,
                       fmt::format("count {} exceeds the limit {}", d.count, limits.max_count));
    v.over_limit = true;
    return v;
  }
  const auto collective = static_cast<proto::Collective>(d.collective);
  if (limits.comm_size == 0 || limits.comm_size > kMaxCommSize ||
      limits.comm_rank >= limits.comm_size) {
    return reject(Status::kInternal, fmt::format("rank {} of a communicator of {} ranks",
                                                 limits.comm_rank, limits.comm_size));
  }
  if (proto::collective_has_root(collective) && d.root >= limits.comm_size) {
    return reject(
        Status::kInvalidArgument,
        fmt::format("root {} is not a rank of the {}-rank communicator", d.root, limits.comm_size));
  }
  const uint64_t elem = proto::dtype_size(static_cast<proto::DType>(d.dtype));
  proto::BufferElems elems =
      proto::buffer_elems(collective, d.count, limits.comm_size, d.root == limits.comm_rank);
  if (proto::aux_entries(collective, limits.comm_size) > 0) {
    if (limits.aux == nullptr) return reject(Status::kInternal, "count arrays not read");
    if ((d.flags & proto::kOpFlagInPlace) != 0) {
      return reject(Status::kUnsupported,
                    fmt::format("{} does not run in place", proto::collective_name(collective)));
    }
    if (Verdict v = vector_extents(collective, limits.aux, limits.comm_size, limits.comm_rank,
                                   d.count, limits.max_count, elems);
        !v.ok()) {
      return v;
    }
  }
  // Cannot overflow: count <= 2^40, comm_size <= 2^20, elem <= 8.
  const uint64_t send_bytes = elems.send * elem;
  const uint64_t recv_bytes = elems.recv * elem;
  if (Verdict v = check_buffer("send", d.send_offset, send_bytes, elem, limits); !v.ok()) {
    return v;
  }
  if (Verdict v = check_buffer("receive", d.recv_offset, recv_bytes, elem, limits); !v.ok()) {
    return v;
  }
  if ((d.flags & proto::kOpFlagInPlace) != 0) {
    const proto::InPlace layout =
        proto::in_place_layout(collective, d.count, limits.comm_rank, d.root);
    const uint64_t shift = layout.index * elem;
    const bool ok =
        (layout.kind == proto::InPlace::kSendInRecv && d.send_offset == d.recv_offset + shift) ||
        (layout.kind == proto::InPlace::kRecvInSend && d.recv_offset == d.send_offset + shift);
    if (!ok) {
      return reject(Status::kInvalidArgument,
                    fmt::format("in-place flag set but send offset {} and receive offset {} do not "
                                "alias as {} in place requires",
                                d.send_offset, d.recv_offset, proto::collective_name(collective)));
    }
  } else if (send_bytes > 0 && recv_bytes > 0 && d.send_offset < d.recv_offset + recv_bytes &&
             d.recv_offset < d.send_offset + send_bytes) {
    return reject(Status::kInvalidArgument,
                  fmt::format("send [{}, +{}) and receive [{}, +{}) overlap without the in-place "
                              "flag",
                              d.send_offset, send_bytes, d.recv_offset, recv_bytes));
  }
  return {};
}

Verdict check_aux_range(const proto::OpDescriptor& d, const ValidationLimits& limits) {
  const auto collective = static_cast<proto::Collective>(d.collective);
  const uint64_t bytes = proto::aux_entries(collective, limits.comm_size) * sizeof(uint64_t);
  if (d.aux_offset > limits.arena_bytes || bytes > limits.arena_bytes - d.aux_offset ||
      d.aux_offset % sizeof(uint64_t) != 0) {
    return reject(
        Status::kOutOfRange,
        fmt::format("{} count arrays [offset {}, +{} bytes) are outside the {}-byte "
                    "arena or not 8-byte aligned",
                    proto::collective_name(collective), d.aux_offset, bytes, limits.arena_bytes));
  }
  return {};
}

Verdict vector_extents(proto::Collective c, const uint64_t* aux, uint32_t size, uint32_t rank,
                       uint64_t count, uint64_t max_count, proto::BufferElems& out) {
  const uint64_t entries = proto::aux_entries(c, size);
  for (uint64_t i = 0; i < entries; ++i) {
    if (aux[i] > max_count) {
      return reject(Status::kInvalidArgument,
                    fmt::format("{} count array entry {} is {}, over the limit {}",
                                proto::collective_name(c), i, aux[i], max_count));
    }
  }
  // Each run [displ, displ + count) must fit; the extent is the furthest end.
  auto extent = [&](const uint64_t* counts, const uint64_t* displs) {
    uint64_t end = 0;
    for (uint32_t r = 0; r < size; ++r) end = std::max(end, displs[r] + counts[r]);
    return end;
  };
  if (c == proto::Collective::kAllgatherv) {
    if (aux[rank] != count) {
      return reject(Status::kInvalidArgument,
                    fmt::format("allgatherv: send count {} but recv_counts[{}] is {}", count, rank,
                                aux[rank]));
    }
    out = {count, extent(aux, aux + size)};
  } else {
    out = {extent(aux, aux + size), extent(aux + size_t{2} * size, aux + size_t{3} * size)};
  }
  return {};
}

}  // namespace nodecomm::ipc
