#include "batch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace nodecomm::bench {

Pending post_draining(Backend& backend, const Call& call,
                      const std::function<bool()>& complete_one) {
  for (;;) {
    if (const Pending p = backend.post(call); p != 0) return p;
    if (!complete_one()) {
      throw BackendError(
          "the backend refuses more operations in flight, and this rank has none left to "
          "complete");
    }
  }
}

int batch_slots(int batch, size_t max_bytes) {
  const uint64_t pair = 2 * std::max<uint64_t>(max_bytes, 1);
  const uint64_t fit = std::max<uint64_t>(1, kBatchBudget / pair);
  return static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(std::max(batch, 1)), fit));
}

uint64_t batch_arena_bytes(int batch, size_t max_bytes) {
  if (batch <= 1) return 0;
  constexpr uint64_t kDefaultArena = 64ull << 20;
  // Per slot a send and a receive buffer, each rounded up to nc_alloc's page alignment, plus
  // the slack of arena_bytes_for (the sync word, buffers that grow to one element per rank).
  const uint64_t buffer = (static_cast<uint64_t>(max_bytes) + 4095) / 4096 * 4096;
  const uint64_t need =
      static_cast<uint64_t>(batch_slots(batch, max_bytes)) * 2 * buffer + (2ull << 20);
  return need > kDefaultArena ? need : 0;
}

Batch::~Batch() {
  for (void* p : owned_) backend_.free(p);
}

void Batch::allocate(void* send, size_t send_bytes, void* recv, size_t recv_bytes, int slots) {
  const bool inplace = send == recv;
  send_.assign(1, send);
  recv_.assign(1, recv);
  send_bytes_ = inplace ? std::max(send_bytes, recv_bytes) : send_bytes;
  for (int s = 1; s < slots; ++s) {
    owned_.reserve(owned_.size() + 2);
    void* a = backend_.alloc(send_bytes_);
    owned_.push_back(a);
    void* b = a;
    if (!inplace) {
      b = backend_.alloc(recv_bytes);
      owned_.push_back(b);
    }
    send_.push_back(a);
    recv_.push_back(b);
  }
  pending_.assign(static_cast<size_t>(batch_), 0);
  attrs_.resize(send_.size());
  names_.resize(send_.size());
}

void Batch::replicate(size_t bytes) {
  bytes = std::min(bytes, send_bytes_);
  for (size_t s = 1; s < send_.size(); ++s) std::memcpy(send_[s], send_[0], bytes);
}

void Batch::run(const Call& base) {
  const size_t slots = send_.size();
  const auto* send0 = static_cast<const unsigned char*>(send_[0]);
  const auto* recv0 = static_cast<const unsigned char*>(recv_[0]);
  const ptrdiff_t send_off = base.send ? static_cast<const unsigned char*>(base.send) - send0 : 0;
  const ptrdiff_t recv_off = base.recv ? static_cast<unsigned char*>(base.recv) - recv0 : 0;
  if (base.attr != nullptr) {
    for (size_t s = 0; s < slots; ++s) {
      names_[s] = fmt::format("{}.{}", base.attr->name ? base.attr->name : "batch", s);
      attrs_[s] = *base.attr;
      attrs_[s].name = names_[s].c_str();
    }
  }
  std::fill(pending_.begin(), pending_.end(), 0);
  size_t oldest = 0;  // every operation before it has completed
  const auto complete_oldest = [&] {
    while (oldest < pending_.size() && pending_[oldest] == 0) ++oldest;
    if (oldest == pending_.size()) return false;
    backend_.wait(pending_[oldest]);
    pending_[oldest] = 0;
    return true;
  };
  for (size_t j = 0; j < pending_.size(); ++j) {
    const size_t s = j % slots;
    if (j >= slots && pending_[j - slots] != 0) {
      // The slot's previous operation must be done before its buffers are used again.
      backend_.wait(pending_[j - slots]);
      pending_[j - slots] = 0;
    }
    Call call = base;
    if (base.send != nullptr) call.send = static_cast<const unsigned char*>(send_[s]) + send_off;
    if (base.recv != nullptr) call.recv = static_cast<unsigned char*>(recv_[s]) + recv_off;
    if (base.attr != nullptr) call.attr = &attrs_[s];
    pending_[j] = post_draining(backend_, call, complete_oldest);
  }
  backend_.wait_all(pending_);
}

uint64_t verify_compressed(const Pattern& pattern, const float* result, size_t count,
                           nc_compress_t compress, int nodes, std::vector<Mismatch>* recorded,
                           size_t max_recorded) {
  const int ranks = pattern.world_size();
  const auto magnitude = [&](size_t i) {
    double s = 0;
    for (int r = 0; r < ranks; ++r) s += std::fabs(static_cast<double>(pattern.value(r, i)));
    return pattern.op() == NC_AVG ? s / ranks : s;
  };
  double rel = 0;
  double floor = 0;
  switch (compress) {
    case NC_COMPRESS_NONE:
      break;
    case NC_COMPRESS_BF16:
      rel = std::ldexp(1.0, -7) * nodes;
      break;
    case NC_COMPRESS_F16:
      rel = std::ldexp(1.0, -10) * nodes;
      break;
    case NC_COMPRESS_INT8: {
      double most = 0;
      for (size_t i = 0; i < count; ++i) most = std::max(most, magnitude(i));
      floor = 2.0 / 127 * nodes * most;
      break;
    }
  }
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    pattern.expected(i, &want);
    const double got = result[i];
    const double tol = std::max(rel * std::max(magnitude(i), std::fabs(double{want})), floor);
    if (std::fabs(got - want) <= tol) continue;  // NaN never passes
    if (recorded != nullptr && recorded->size() < max_recorded) {
      recorded->push_back(
          {i, fmt::format("{}", result[i]), fmt::format("{} +- {:.3g} (compressed)", want, tol)});
    }
    ++wrong;
  }
  return wrong;
}

}  // namespace nodecomm::bench
