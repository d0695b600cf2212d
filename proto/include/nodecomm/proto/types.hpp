// Enumerations shared by the ABI, the daemon, the client library and the C API.
// Their numeric values are part of the ABI and of nodecomm.h: append, never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace nodecomm::proto {

enum class Status : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // a field the caller supplied is out of its domain
  kOutOfRange = 2,       // an offset or length outside the arena
  kUnsupported = 3,      // a valid combination this build does not implement
  kMismatch = 4,         // members of a communicator submitted different operations
  kPeerLost = 5,         // a member rank or a remote daemon disappeared
  kDaemonLost = 6,       // the client's own daemon disappeared
  kTimeout = 7,
  kQueueFull = 8,  // too many operations in flight
  kNoMemory = 9,
  kNotInitialized = 10,
  kProtocol = 11,  // the other side broke the shared-memory or socket protocol
  kPermission = 12,
  kInternal = 13,
  kInProgress = 14,  // test(): not complete yet
};

enum class DType : uint8_t {
  kF32 = 0,
  kF64 = 1,
  kI32 = 2,
  kI64 = 3,
  kF16 = 4,   // IEEE binary16
  kBF16 = 5,  // bfloat16
  kI8 = 6,
  kU8 = 7,
  kCount
};
// How an allreduce's data travels between nodes; the node's ranks are always summed exactly.
enum class Compression : uint8_t {
  kNone = 0,
  kBF16 = 1,  // f32 data as bfloat16 on the wire, accumulated in f32
  kF16 = 2,   // f32 data as IEEE binary16 on the wire, accumulated in f32
  kInt8 = 3,  // f32 data as int8 blocks with per-block scales, with error feedback
  kCount
};
// Order in which ready operations of one communicator cross the network.
enum class PriorityPolicy : uint8_t {
  kNone = 0,    // submission (sequence) order
  kDirect = 1,  // the caller's priority, higher first; ties in submission order
  kLifo = 2,    // the latest submission first, as backprop produces the first layer last
  kCount
};
enum class RedOp : uint8_t { kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4, kCount };
enum class Collective : uint16_t {
  kAllreduce = 0,
  kReduce = 1,
  kBroadcast = 2,
  kReduceScatter = 3,
  kAllgather = 4,
  kGather = 5,
  kScatter = 6,
  kAlltoall = 7,
  kBarrier = 8,
  kCommSplit = 9,  // collective over the parent: creates the new communicators
  kCommFree = 10,  // collective over the communicator: releases it
  kAllgatherv = 11,
  kAlltoallv = 12,
  kCount
};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kI8:
    case DType::kU8:
      return 1;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF64:
    case DType::kI64:
      return 8;
    default:
      return 0;
  }
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    default:
      return "?dtype";
  }
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

constexpr std::string_view redop_name(RedOp op) {
  switch (op) {
    case RedOp::kSum:
      return "sum";
    case RedOp::kProd:
      return "prod";
    case RedOp::kMin:
      return "min";
    case RedOp::kMax:
      return "max";
    case RedOp::kAvg:
      return "avg";
    default:
      return "?redop";
  }
}

constexpr std::string_view compression_name(Compression c) {
  switch (c) {
    case Compression::kNone:
      return "none";
    case Compression::kBF16:
      return "bf16";
    case Compression::kF16:
      return "f16";
    case Compression::kInt8:
      return "int8";
    default:
      return "?compression";
  }
}

constexpr std::string_view priority_policy_name(PriorityPolicy p) {
  switch (p) {
    case PriorityPolicy::kNone:
      return "none";
    case PriorityPolicy::kDirect:
      return "direct";
    case PriorityPolicy::kLifo:
      return "lifo";
    default:
      return "?policy";
  }
}

constexpr std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kReduce:
      return "reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kCommSplit:
      return "comm_split";
    case Collective::kCommFree:
      return "comm_free";
    case Collective::kAllgatherv:
      return "allgatherv";
    case Collective::kAlltoallv:
      return "alltoallv";
    default:
      return "?collective";
  }
}

constexpr bool collective_reduces(Collective c) {
  return c == Collective::kAllreduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

constexpr bool collective_has_root(Collective c) {
  return c == Collective::kReduce || c == Collective::kBroadcast || c == Collective::kGather ||
         c == Collective::kScatter;
}

// uint64 entries of the count arrays a vector collective keeps at aux_offset.
constexpr uint64_t aux_entries(Collective c, uint64_t size) {
  return c == Collective::kAllgatherv ? 2 * size : c == Collective::kAlltoallv ? 4 * size : 0;
}

// Elements of the send and receive buffers one rank uses for a collective of `count` (the
// per-rank block, as in nodecomm.h) on a communicator of `size` ranks. 0 means the rank does
// not touch that buffer (the receive buffer of a non-root in reduce, for example).
struct BufferElems {
  uint64_t send;
  uint64_t recv;
};
constexpr BufferElems buffer_elems(Collective c, uint64_t count, uint64_t size, bool is_root) {
  switch (c) {
    case Collective::kAllreduce:
      return {count, count};
    case Collective::kReduce:
      return {count, is_root ? count : 0};
    case Collective::kBroadcast:
      return {is_root ? count : 0, count};
    case Collective::kReduceScatter:
      return {count * size, count};
    case Collective::kAllgather:
      return {count, count * size};
    case Collective::kGather:
      return {count, is_root ? count * size : 0};
    case Collective::kScatter:
      return {is_root ? count * size : 0, count};
    case Collective::kAlltoall:
      return {count * size, count * size};
    default:
      return {0, 0};
  }
}

// How the two buffers alias when a collective runs in place (kOpFlagInPlace): one lies
// inside the other, `index` elements from its start, as nodecomm.h documents per collective.
struct InPlace {
  enum Kind : uint8_t { kNotAllowed, kSendInRecv, kRecvInSend } kind;
  uint64_t index;
};
constexpr InPlace in_place_layout(Collective c, uint64_t count, uint64_t rank, uint64_t root) {
  switch (c) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kBroadcast:
      return {InPlace::kSendInRecv, 0};
    case Collective::kAllgather:
      return {InPlace::kSendInRecv, rank * count};
    case Collective::kGather:
      return {InPlace::kSendInRecv, root * count};
    case Collective::kReduceScatter:
      return {InPlace::kRecvInSend, rank * count};
    case Collective::kScatter:
      return {InPlace::kRecvInSend, root * count};
    default:
      return {InPlace::kNotAllowed, 0};
  }
}

constexpr std::string_view status_name(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kOutOfRange:
      return "out of range";
    case Status::kUnsupported:
      return "unsupported";
    case Status::kMismatch:
      return "mismatched collective";
    case Status::kPeerLost:
      return "peer lost";
    case Status::kDaemonLost:
      return "daemon lost";
    case Status::kTimeout:
      return "timeout";
    case Status::kQueueFull:
      return "queue full";
    case Status::kNoMemory:
      return "out of memory";
    case Status::kNotInitialized:
      return "not initialized";
    case Status::kProtocol:
      return "protocol violation";
    case Status::kPermission:
      return "permission denied";
    case Status::kInternal:
      return "internal error";
    case Status::kInProgress:
      return "in progress";
  }
  return "unknown status";
}

}  // namespace nodecomm::proto
