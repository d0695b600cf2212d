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
