#include "shared_memory.hpp"

#include <ATen/MapAllocator.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace nodecomm::torch_backend {

SharedMemory& SharedMemory::instance() {
  static auto* registry = new SharedMemory();  // never destroyed: storages outlive statics
  return *registry;
}

SharedMemory::Region* SharedMemory::find(uintptr_t base, size_t bytes) {
  for (auto& r : regions_) {
    if (r.base <= base && base + bytes <= r.base + r.bytes) return &r;
  }
  return nullptr;
}

bool SharedMemory::register_region(nc_context_t* ctx, Region& region) {
  if (nc_register_fd(ctx, region.fd, 0, region.bytes, region.address) != NC_OK) {
    refused_ = nc_last_error();
    TORCH_WARN(
        "nodecomm: tensors go through staging copies from now on: the daemon refused to "
        "register ",
        region.bytes, " bytes of shared memory: ", refused_);
    return false;
  }
  region.registered = true;
  return true;
}

void SharedMemory::prepare(nc_context_t* ctx, const at::Tensor& t, bool move_heap) {
  const auto& storage = t.storage();
  const auto base = reinterpret_cast<uintptr_t>(storage.data());
  const size_t bytes = storage.nbytes();
  if (bytes < kMinBytes || base == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx != ctx_) {  // a new context: earlier registrations died with the old one
    for (auto& r : regions_) r.registered = false;
    ctx_ = ctx;
  }
  if (!refused_.empty()) return;
  if (Region* known = find(base, bytes)) {
    if (!known->registered) register_region(ctx, *known);
    return;
  }
  // Shared by descriptor already (share_memory_() with torch's file_descriptor strategy).
  if (auto* mapped = at::MapAllocator::fromDataPtr(storage.data_ptr()); mapped != nullptr) {
    if (mapped->fd() < 0 || mapped->data() != storage.data()) return;
    const int fd = ::dup(mapped->fd());
    if (fd < 0) return;
    regions_.push_back({mapped->data(), base, static_cast<size_t>(mapped->size()), fd, false});
    register_region(ctx, regions_.back());
    return;
  }
  if (move_heap && ++sightings_[storage.unsafeGetStorageImpl()] >= 2) move_to_shared(ctx, t);
}

void SharedMemory::move_to_shared(nc_context_t* ctx, const at::Tensor& t) {
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  sightings_.erase(impl);
  const size_t bytes = impl->nbytes();
  // Sealable: the daemon seals it against shrinking (F_SEAL_SHRINK), so it can never fault.
  const int fd = ::memfd_create("nodecomm-torch-storage", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return;
  void* p = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    ::close(fd);
    return;
  }
  Region region{p, reinterpret_cast<uintptr_t>(p), bytes, fd, false};
  if (!register_region(ctx, region)) {
    ::munmap(p, bytes);
    ::close(fd);
    return;
  }
  std::memcpy(p, impl->data(), bytes);
  // As Tensor.share_memory_() does: every view of the storage follows. The mapping is never
  // unmapped (see the header), so the deleter has nothing to do.
  impl->set_data_ptr_noswap(at::DataPtr(
      p, p, [](void*) {}, at::Device(at::kCPU)));
  regions_.push_back(region);
}

void SharedMemory::forget_context() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : regions_) r.registered = false;
  ctx_ = nullptr;
  refused_.clear();
}

}  // namespace nodecomm::torch_backend
