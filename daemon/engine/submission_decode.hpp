// The engine's decoding of one descriptor a client submitted (Engine::accept), apart so that
// the decoder fuzzer (tests/fuzz/decoder_fuzz.cpp) runs this very code rather than a copy of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nodecomm/ipc/validate.hpp"
#include "nodecomm/proto/abi.hpp"

namespace nodecomm::daemon {

// Decodes `desc` (the daemon's private copy of a ring entry) against `limits` (the arena and
// regions of the submitting client, the count limit, its communicator's size and its rank in
// it). A vector collective's count arrays are checked to lie inside the arena and then copied
// once into `aux` with `read_aux(offset, out, bytes)`: the client may rewrite its arena at any
// moment, so everything after this works on the copy. Then the whole descriptor is validated
// with that copy. `aux` is left empty for the other collectives. The verdict says what is wrong.
template <class ReadAux>
ipc::Verdict decode_submission(const proto::OpDescriptor& desc, ipc::ValidationLimits limits,
                               std::vector<uint64_t>& aux, ReadAux&& read_aux) {
  aux.clear();
  const uint64_t entries =
      desc.collective < static_cast<uint16_t>(proto::Collective::kCount)
          ? proto::aux_entries(static_cast<proto::Collective>(desc.collective), limits.comm_size)
          : 0;
  if (entries > 0) {
    ipc::Verdict range = ipc::check_aux_range(desc, limits);
    if (!range.ok()) return range;
    aux.resize(entries);
    read_aux(desc.aux_offset, aux.data(), static_cast<size_t>(entries * sizeof(uint64_t)));
    limits.aux = aux.data();
  }
  return ipc::validate_descriptor(desc, limits);
}

}  // namespace nodecomm::daemon
