// Zero copy for the backend's allreduces: a tensor whose storage is shared memory with a file
// descriptor (Tensor.share_memory_()) is registered with the daemon once (nc_register_fd), so
// the daemon reduces it in place. A heap storage allreduced again and again (DDP's gradient
// buckets) is moved into shared memory in place on its second allreduce, as
// nodecomm.torch.register_tensor and the DDP hook do. Anything else goes through libnodecomm's
// copy path. Registered memory stays mapped until the process exits: the daemon maps the same
// pages, and reusing the addresses for other memory would make it think that memory is shared.
#pragma once

#include <ATen/core/Tensor.h>
#include <nodecomm.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace nodecomm::torch_backend {

class SharedMemory {
 public:
  static SharedMemory& instance();

  // Before `t` is posted: registers or moves its storage when the rules above say so. Never
  // throws; a refusal (the daemon's region or --max-arena limit) is warned about once and
  // stops further attempts.
  void prepare(nc_context_t* ctx, const at::Tensor& t, bool move_heap);
  // The context is going away: its registrations with it.
  void forget_context();

  // Storages below this stay on the copy path (registering costs a daemon round trip and one
  // of its 64 regions per client).
  static constexpr size_t kMinBytes = size_t{1} << 20;

 private:
  struct Region {
    void* address;
    uintptr_t base;  // address, for range comparisons
    size_t bytes;
    int fd;  // ours (moved heap storages) stay open, to register again after a re-init
    bool registered;
  };
  Region* find(uintptr_t base, size_t bytes);
  bool register_region(nc_context_t* ctx, Region& region);
  void move_to_shared(nc_context_t* ctx, const at::Tensor& t);

  std::mutex mu_;
  nc_context_t* ctx_ = nullptr;
  std::vector<Region> regions_;
  std::unordered_map<const void*, int> sightings_;  // StorageImpl -> allreduces seen
  std::string refused_;                             // why the daemon said no, once it did
};

}  // namespace nodecomm::torch_backend
