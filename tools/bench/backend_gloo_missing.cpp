// Built instead of backend_gloo.cpp where Gloo (libgloo-dev) was not found at configure time.
#include "backend.hpp"

namespace nodecomm::bench {

std::unique_ptr<Backend> make_gloo_backend() {
  throw BackendError(
      "this nodecomm-bench was built without Gloo (install libgloo-dev, e.g. with "
      "tools/install-deps.sh, and reconfigure)");
}

}  // namespace nodecomm::bench
