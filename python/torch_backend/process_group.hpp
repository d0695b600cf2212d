// torch.distributed's "nodecomm" backend: a c10d::ProcessGroup (torch 1.13) whose collectives
// are nodecomm operations on one communicator of the process's context. Every call posts and
// returns a NodecommWork at once; the Completer's thread completes it, so DDP overlaps
// backward with the daemon's work exactly as with the communication hook.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "work.hpp"

namespace nodecomm::torch_backend {

struct GroupOptions {
  nc_compress_t compress = NC_COMPRESS_NONE;  // f32 sum/avg allreduces only
  size_t piece_bytes = 4000000;  // element-wise ops are posted in pieces (the hook's 4 MB)
  int32_t priority = 0;
  // Move heap storages allreduced repeatedly into registered shared memory (shared_memory.hpp).
  bool move_heap = true;
};

class ProcessGroupNodecomm final : public c10d::ProcessGroup {
 public:
  // `comm` is this group's communicator, made (dup or split) before construction by every
  // rank that must take part; rank and size must be this rank's place in it.
  ProcessGroupNodecomm(nc_context_t* ctx, nc_comm_t comm, int rank, int size,
                       std::chrono::milliseconds timeout, c10::intrusive_ptr<c10d::Store> store,
                       std::string name, GroupOptions options);

  const std::string getBackendName() const override { return "nodecomm"; }
  nc_comm_t comm() const { return comm_; }
  const GroupOptions& options() const { return options_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  // What one torch call becomes: nodecomm posts, buffers to keep, copies back on success.
  using Post = std::function<nc_status_t(const nc_op_attr_t*, nc_request_t*)>;
  struct Plan {
    std::vector<Post> posts;
    std::vector<at::Tensor> keep;
    std::vector<std::function<void()>> copy_back;
    nc_compress_t compress = NC_COMPRESS_NONE;
  };

 private:
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, const std::string& op,
                                        const std::string& detail, std::vector<at::Tensor> value,
                                        Plan plan, std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout_for(std::chrono::milliseconds requested) const;
  enum class Elementwise { kAllreduce, kBroadcast, kReduce };
  // allreduce / broadcast / reduce of one tensor, in place, in pieces, appended to `plan`.
  void plan_elementwise(Elementwise kind, const at::Tensor& t, const c10d::ReduceOp& op, int root,
                        Plan& plan);
  // Every rank's `input` into `outputs` (one tensor per rank), appended to `plan`.
  void plan_allgather(const std::vector<at::Tensor>& outputs, const at::Tensor& input, Plan& plan);

  nc_context_t* const ctx_;
  const nc_comm_t comm_;
  const std::chrono::milliseconds timeout_;
  const c10::intrusive_ptr<c10d::Store> store_;
  const std::string name_;
  const GroupOptions options_;
  uint64_t monitored_barriers_ = 0;
};

}  // namespace nodecomm::torch_backend
