// What the two baselines (Open MPI and Gloo) share: host memory from the heap, and the same
// refusals as nodecomm, so that every backend fails a bad combination alike.
#pragma once

#include "backend.hpp"

namespace nodecomm::bench {

class BaselineBackend : public Backend {
 public:
  std::string buffer_kind() const override { return "malloc"; }
  // Mirrors nodecomm, which rejects avg on integers with NC_ERR_INVALID_ARGUMENT (an integer
  // average would have to pick a rounding).
  std::optional<Rejection> reject(Collective collective, nc_dtype_t dtype,
                                  nc_redop_t op) const override;
  // Page alignment, like nc_alloc for large buffers, so every backend sees equally aligned
  // memory. Throws BackendError.
  void* alloc(size_t bytes) override;
  void free(void* ptr) noexcept override;
};

}  // namespace nodecomm::bench
