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
  // A well-formed request over a configured limit (a count too large), which a correct
  // client can send; anything else is a descriptor no correct client writes.
  bool over_limit = false;
  bool ok() const { return status == proto::Status::kOk; }
};

inline constexpr uint32_t kMaxCommSize = 1u << 20;

struct ValidationLimits {
  uint64_t arena_bytes = 0;
  uint64_t max_count = uint64_t{1} << 40;
  uint32_t comm_size = 1;  // ranks in the descriptor's communicator
  uint32_t comm_rank = 0;  // the submitting rank's place in it
  // allgatherv/alltoallv: the daemon's private copy of the count arrays (aux_entries long),
  // taken after check_aux_range() passed.
  const uint64_t* aux = nullptr;
  // Sizes of the client's registered regions (proto::region_offset); none by default.
  const uint64_t* region_bytes = nullptr;
  uint32_t region_count = 0;
};

// allgatherv/alltoallv: the count arrays at aux_offset lie inside the arena, 8-byte aligned.
Verdict check_aux_range(const proto::OpDescriptor& d, const ValidationLimits& limits);
// Elements a vector collective's buffers span on this rank, from its count arrays; rejects
// entries over the count limit. `aux` has proto::aux_entries(c, size) entries.
Verdict vector_extents(proto::Collective c, const uint64_t* aux, uint32_t size, uint32_t rank,
                       uint64_t count, uint64_t max_count, proto::BufferElems& out);

// Checks enums, flags, reserved fields, element count and root, and that the buffers the
// collective uses on this rank lie inside the arena (or inside one registered region) with
// natural alignment, without
// arithmetic overflow, and alias only as the collective's in-place convention allows.
Verdict validate_descriptor(const proto::OpDescriptor& d, const ValidationLimits& limits);

// A printable copy of the descriptor's tensor name (stops at NUL, replaces non-printables).
std::string tensor_name(const proto::OpDescriptor& d);

}  // namespace nodecomm::ipc
