// Validation of descriptors read from a client's submission ring. Nothing a client puts in
// shared memory is trusted: the daemon calls this on its private copy of every descriptor
// before using any field, and the client library calls it too, to fail early and locally.
#pragma once

#include <cstdint>
#include <string>

#include "nodecomm/proto/abi.hpp"
#include "nodecomm/proto/types.hpp"

namespace nodecomm::ipc {

struct Verdict {
  proto::Status status = proto::Status::kOk;
  std::string message;  // says which field, what it held, and what was expected
  bool ok() const { return status == proto::Status::kOk; }
};

struct ValidationLimits {
  uint64_t arena_bytes = 0;
  uint64_t max_count = uint64_t{1} << 40;
};

// Checks enums, flags, reserved fields, element count, and that both buffers lie inside the
// arena with natural alignment and without arithmetic overflow.
Verdict validate_descriptor(const proto::OpDescriptor& d, const ValidationLimits& limits);

// A printable copy of the descriptor's tensor name (stops at NUL, replaces non-printables).
std::string tensor_name(const proto::OpDescriptor& d);

}  // namespace nodecomm::ipc
