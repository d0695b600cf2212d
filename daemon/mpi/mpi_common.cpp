#include "mpi/mpi_common.hpp"

#include <fmt/format.h>

#include "net/transport.hpp"

namespace nodecomm::daemon {

MPI_Datatype to_mpi(proto::DType t) {
  switch (t) {
    case proto::DType::kF32:
      return MPI_FLOAT;
    case proto::DType::kF64:
      return MPI_DOUBLE;
    case proto::DType::kI32:
      return MPI_INT32_T;
    case proto::DType::kI64:
      return MPI_INT64_T;
    case proto::DType::kI8:
      return MPI_INT8_T;
    case proto::DType::kU8:
      return MPI_UINT8_T;
    default:
      // f16/bf16 never reach the wire: the engine widens them to f32 first.
      throw TransportError(fmt::format("dtype {} has no MPI equivalent", proto::dtype_name(t)));
  }
}

MPI_Op to_mpi(proto::RedOp op) {
  switch (op) {
    case proto::RedOp::kSum:
      return MPI_SUM;
    case proto::RedOp::kProd:
      return MPI_PROD;
    case proto::RedOp::kMin:
      return MPI_MIN;
    case proto::RedOp::kMax:
      return MPI_MAX;
    default:
      // avg is a sum on the wire; the engine divides afterwards.
      throw TransportError(fmt::format("op {} has no MPI equivalent", proto::redop_name(op)));
  }
}

namespace {

// MPI_User_function over MPI_INT8_T or MPI_UINT8_T: modulo-256 arithmetic is the same for both.
void wrapping_sum8(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<uint8_t>(a[i] + b[i]);
}

void wrapping_prod8(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = static_cast<uint8_t>(a[i] * b[i]);
}

MPI_Op created_op(MPI_User_function* fn) {
  MPI_Op op = MPI_OP_NULL;
  check_mpi(MPI_Op_create(fn, /*commute=*/1, &op), "MPI_Op_create", 0);
  return op;
}

}  // namespace

MPI_Op to_mpi(proto::RedOp op, proto::DType t) {
  const bool byte = t == proto::DType::kU8 || t == proto::DType::kI8;
  if (byte && op == proto::RedOp::kSum) {
    // Created on first use, after MPI_Init, by the thread that drives MPI; kept until exit.
    static const MPI_Op sum8 = created_op(&wrapping_sum8);
    return sum8;
  }
  if (byte && op == proto::RedOp::kProd) {
    static const MPI_Op prod8 = created_op(&wrapping_prod8);
    return prod8;
  }
  return to_mpi(op);
}

int mpi_tag_ub() {
  int* tag_ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, static_cast<void*>(&tag_ub), &found);
  // The standard guarantees at least 32767.
  return found != 0 && tag_ub != nullptr ? *tag_ub : 32767;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int code, const char* what, uint32_t node) {
  if (code != MPI_SUCCESS) {
    throw TransportError(fmt::format("{} on node {}: {}", what, node, mpi_error_text(code)));
  }
}

}  // namespace nodecomm::daemon
