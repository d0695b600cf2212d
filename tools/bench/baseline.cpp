#include "baseline.hpp"

#include <fmt/format.h>

#include <cstdlib>

#include "host_reduce.hpp"

namespace nodecomm::bench {

std::optional<Rejection> BaselineBackend::reject(Collective collective, nc_dtype_t dtype,
                                                 nc_redop_t op) const {
  if (is_reducing(collective) && op == NC_AVG && is_integer(dtype)) {
    return Rejection{fmt::format("--redop avg is only defined for floating-point types, not {} "
                                 "(nodecomm rejects it too)",
                                 nc_dtype_name(dtype)),
                     1};
  }
  return std::nullopt;
}

void* BaselineBackend::alloc(size_t bytes) {
  void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (p == nullptr) throw BackendError(fmt::format("aligned_alloc of {} bytes failed", bytes));
  return p;
}

void BaselineBackend::free(void* ptr) noexcept {
  std::free(ptr);
}

}  // namespace nodecomm::bench
