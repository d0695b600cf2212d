#include "process_group.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "completer.hpp"
#include "plan.hpp"
#include "shared_memory.hpp"

namespace nodecomm::torch_backend {

namespace {

using c10d::ReduceOp;
using namespace std::chrono_literals;

std::optional<nc_dtype_t> native_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return NC_F32;
    case at::kDouble:
      return NC_F64;
    case at::kInt:
      return NC_I32;
    case at::kLong:
      return NC_I64;
    case at::kHalf:
      return NC_F16;
    case at::kBFloat16:
      return NC_BF16;
    case at::kChar:
      return NC_I8;
    case at::kByte:
      return NC_U8;
    default:
      return std::nullopt;
  }
}

// How a tensor crosses: nodecomm's element type, and how many of them one torch element is.
struct Wire {
  nc_dtype_t dtype;
  size_t per_element;
};

// Data movement carries any dtype, as bytes where nodecomm has no such type.
Wire move_wire(at::ScalarType t) {
  if (auto d = native_dtype(t)) return {*d, 1};
  return {NC_U8, c10::elementSize(t)};
}

const char* op_name(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM:
      return "sum";
    case ReduceOp::AVG:
      return "avg";
    case ReduceOp::PRODUCT:
      return "product";
    case ReduceOp::MIN:
      return "min";
    case ReduceOp::MAX:
      return "max";
    case ReduceOp::BAND:
      return "band";
    case ReduceOp::BOR:
      return "bor";
    case ReduceOp::BXOR:
      return "bxor";
    case ReduceOp::PREMUL_SUM:
      return "premul_sum";
    default:
      return "unknown";
  }
}

nc_redop_t to_redop(const ReduceOp& op) {
  switch (op.op_) {
    case ReduceOp::SUM:
      return NC_SUM;
    case ReduceOp::AVG:
      return NC_AVG;
    case ReduceOp::PRODUCT:
      return NC_PROD;
    case ReduceOp::MIN:
      return NC_MIN;
    case ReduceOp::MAX:
      return NC_MAX;
    default:
      TORCH_CHECK(false, "nodecomm: ReduceOp ", op_name(op),
                  " is not supported (sum, product, min, max, avg)");
  }
}

bool is_sum_or_avg(const ReduceOp& op) {
  return op.op_ == ReduceOp::SUM || op.op_ == ReduceOp::AVG;
}

// Reductions: nodecomm's types; complex sums as pairs of reals; bool min/max/product (and,
// or) as bytes. Anything else cannot be reduced element by element here.
Wire reduce_wire(at::ScalarType t, const ReduceOp& op) {
  to_redop(op);  // refuses the ops nodecomm lacks first
  if (auto d = native_dtype(t)) return {*d, 1};
  if (t == at::kComplexFloat && is_sum_or_avg(op)) return {NC_F32, 2};
  if (t == at::kComplexDouble && is_sum_or_avg(op)) return {NC_F64, 2};
  if (t == at::kBool && !is_sum_or_avg(op)) return {NC_U8, 1};
  TORCH_CHECK(false, "nodecomm: ", c10::toString(t), " cannot be reduced with ", op_name(op),
              " (float32, float64, float16, bfloat16, int8, uint8, int32, int64; complex with "
              "sum/avg; bool with min/max/product)");
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "nodecomm: ", what, ": undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "nodecomm: ", what, ": CPU tensors only, not ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "nodecomm: ", what, ": dense tensors only, not ",
              t.layout());
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "nodecomm: ", what, " takes one tensor per call, not ",
              tensors.size());
  check_tensor(tensors[0], what);
  return tensors[0];
}

void check_list(const std::vector<at::Tensor>& list, size_t size, const at::Tensor& like,
                const char* what) {
  TORCH_CHECK(list.size() == size, "nodecomm: ", what, " needs ", size, " tensors, got ",
              list.size());
  for (const auto& t : list) {
    check_tensor(t, what);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "nodecomm: ", what, ": dtype ",
                t.scalar_type(), " where ", like.scalar_type(), " is expected");
  }
}

void check_root(int root, int size, const char* what) {
  TORCH_CHECK(root >= 0 && root < size, "nodecomm: ", what, ": root ", root,
              " is not a rank of this group (0..", size - 1, ")");
}

char* bytes_of(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

bool overlap(const char* a, size_t a_bytes, const char* b, size_t b_bytes) {
  return a_bytes > 0 && b_bytes > 0 && a < b + b_bytes && b < a + a_bytes;
}

// Staging memory: the arena when it has room (then the post is zero-copy), else the heap
// (libnodecomm then copies through a temporary arena block, as for any user buffer).
at::Tensor stage(int64_t numel, at::ScalarType dtype) {
  auto t = Completer::instance().arena_empty(numel, dtype);
  return t.defined() ? t : at::empty({numel}, at::TensorOptions().dtype(dtype));
}

using Plan = ProcessGroupNodecomm::Plan;

// The memory the daemon reads (`in`) and/or writes (`out`) for `t`: its own when contiguous
// (and not `force_stage`), else a staged copy, copied back into `t` on success when `out`.
char* buffer(const at::Tensor& t, bool in, bool out, Plan& plan, bool force_stage = false) {
  plan.keep.push_back(t);
  if (t.is_contiguous() && !force_stage) return bytes_of(t);
  at::Tensor staged = stage(t.numel(), t.scalar_type());
  if (in) staged.view(t.sizes()).copy_(t);
  if (out) plan.copy_back.emplace_back([t, staged] { t.copy_(staged.view(t.sizes())); });
  plan.keep.push_back(staged);
  return bytes_of(staged);
}

// One block holding the list's tensors back to back: their own memory when they already lie
// that way (as `out.chunk(n)` makes them), else a staged block.
char* list_buffer(const std::vector<at::Tensor>& list, bool in, bool out, Plan& plan,
                  bool force_stage = false) {
  bool adjacent = !list.empty() && !force_stage;
  const char* next = nullptr;
  int64_t total = 0;
  for (const auto& t : list) {
    plan.keep.push_back(t);
    total += t.numel();
    if (!t.is_contiguous() || t.numel() == 0 || (next != nullptr && bytes_of(t) != next)) {
      adjacent = false;
    }
    next = bytes_of(t) + t.nbytes();
  }
  if (adjacent) return bytes_of(list[0]);
  const auto dtype = list.empty() ? at::kByte : list[0].scalar_type();
  at::Tensor block = stage(total, dtype);
  if (in) {
    int64_t at = 0;
    for (const auto& t : list) {
      block.narrow(0, at, t.numel()).view(t.sizes()).copy_(t);
      at += t.numel();
    }
  }
  if (out) {
    plan.copy_back.emplace_back([list, block] {
      int64_t at = 0;
      for (const auto& t : list) {
        t.copy_(block.narrow(0, at, t.numel()).view(t.sizes()));
        at += t.numel();
      }
    });
  }
  plan.keep.push_back(block);
  return bytes_of(block);
}

size_t list_bytes(const std::vector<at::Tensor>& list) {
  size_t n = 0;
  for (const auto& t : list) n += t.nbytes();
  return n;
}

std::string shape_text(const at::Tensor& t, const std::string& extra = {}) {
  return fmt::format("({} x {}{})", t.numel(), c10::toString(t.scalar_type()), extra);
}

}  // namespace

ProcessGroupNodecomm::ProcessGroupNodecomm(nc_context_t* ctx, nc_comm_t comm, int rank, int size,
                                           std::chrono::milliseconds timeout,
                                           c10::intrusive_ptr<c10d::Store> store, std::string name,
                                           GroupOptions options)
    : c10d::ProcessGroup(rank, size),
      ctx_(ctx),
      comm_(comm),
      timeout_(timeout),
      store_(std::move(store)),
      name_(std::move(name)),
      options_(options) {
  int comm_rank = -1;
  int comm_size = -1;
  TORCH_CHECK(nc_comm_rank(ctx_, comm_, &comm_rank) == NC_OK &&
                  nc_comm_size(ctx_, comm_, &comm_size) == NC_OK,
              "nodecomm: group '", name_, "': communicator ", comm_, ": ", nc_last_error());
  TORCH_CHECK(comm_rank == rank && comm_size == size, "nodecomm: group '", name_,
              "': torch says rank ", rank, "/", size,
              " but nodecomm's communicator has this "
              "process as rank ",
              comm_rank, "/", comm_size,
              " (for the default group pass rank=nodecomm.world_rank(), "
              "world_size=nodecomm.world_size(), or use nodecomm.torch.init_process_group)");
  Completer::instance().attach(ctx_);
}

std::chrono::milliseconds ProcessGroupNodecomm::timeout_for(
    std::chrono::milliseconds requested) const {
  return requested == c10d::kUnsetTimeout ? timeout_ : requested;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::submit(
    c10d::OpType type, const std::string& op, const std::string& detail,
    std::vector<at::Tensor> value, Plan plan, std::chrono::milliseconds timeout) {
  auto& completer = Completer::instance();
  const std::string what =
      fmt::format("rank {}/{}: {} of {} on group '{}'", rank_, size_, op, detail, name_);
  TORCH_CHECK(completer.attached_to(ctx_), "nodecomm: ", what,
              ": nodecomm was finalized after this process group was made");
  auto work = c10::make_intrusive<NodecommWork>(type, rank_, what, std::move(value), timeout);
  for (auto& t : plan.keep) work->keep(std::move(t));
  for (auto& fn : plan.copy_back) work->on_success(std::move(fn));
  // In the poll loop before its pieces are posted: the first ones retire (freeing queue
  // slots and arena) while the rest are still being posted.
  completer.add(work);
  const std::string label = fmt::format("torch.{}.{}", name_, op);
  nc_op_attr_t attr{};
  attr.priority = options_.priority;
  attr.name = label.c_str();
  attr.compress = plan.compress;
  const auto deadline = Clock::now() + timeout;
  for (size_t i = 0; i < plan.posts.size(); ++i) {
    for (;;) {
      nc_request_t req = 0;
      const nc_status_t status = plan.posts[i](&attr, &req);
      if (status == NC_OK) {
        work->add_request(req);
        break;
      }
      // Both refusals come before the operation takes a sequence number, so posting again
      // once earlier operations have retired keeps every rank in step.
      const bool ours_in_flight = work->requests_posted() > 0 || completer.in_flight() > 1;
      const bool retry =
          status == NC_ERR_QUEUE_FULL || (status == NC_ERR_NO_MEMORY && ours_in_flight);
      if (retry && Clock::now() < deadline) {
        completer.wait_for_retirement(std::min(deadline, Clock::now() + 50ms));
        continue;
      }
      std::string message = fmt::format("nodecomm: {}: {} ({}): {}", what, nc_status_string(status),
                                        static_cast<int>(status), nc_last_error());
      if (plan.posts.size() > 1) {
        message += fmt::format(" (piece {} of {})", i + 1, plan.posts.size());
      }
      if (status == NC_ERR_NO_MEMORY) {
        message +=
            "; raise the arena (NODECOMM_ARENA_BYTES) or put the tensor in shared "
            "memory (nodecomm.torch.register_tensor / nodecomm.alloc_tensor)";
      }
      if (i > 0) message += "; earlier pieces were posted, so the group is out of step";
      work->posting_done(message);
      TORCH_CHECK(false, message);
    }
  }
  work->posting_done();
  return work;
}

void ProcessGroupNodecomm::plan_elementwise(Elementwise kind, const at::Tensor& t,
                                            const c10d::ReduceOp& op, int root, Plan& plan) {
  const Wire wire = kind == Elementwise::kBroadcast ? move_wire(t.scalar_type())
                                                    : reduce_wire(t.scalar_type(), op);
  const nc_redop_t redop = kind == Elementwise::kBroadcast ? NC_SUM : to_redop(op);
  // reduce leaves non-roots' tensors as they were: nothing to copy back there.
  const bool written = kind != Elementwise::kReduce || rank_ == root;
  if (kind == Elementwise::kAllreduce && t.is_contiguous()) {
    // May move the storage: before its address is taken below.
    SharedMemory::instance().prepare(ctx_, t, options_.move_heap);
  }
  char* base = buffer(t, /*in=*/true, /*out=*/written, plan);
  const size_t elem = nc_dtype_size(wire.dtype);
  const size_t count = static_cast<size_t>(t.numel()) * wire.per_element;
  // piece_bytes 0: one operation (pieces() takes 0 elements per piece to mean that).
  const size_t piece_elems =
      options_.piece_bytes == 0 ? 0 : std::max<size_t>(1, options_.piece_bytes / elem);
  for (const auto& [begin, end] : pieces(count, piece_elems)) {
    char* p = base + begin * elem;
    const size_t n = end - begin;
    const nc_dtype_t dt = wire.dtype;
    switch (kind) {
      case Elementwise::kAllreduce:
        plan.posts.emplace_back([this, p, n, dt, redop](const nc_op_attr_t* a, nc_request_t* r) {
          return nc_allreduce(ctx_, p, p, n, dt, redop, comm_, a, r);
        });
        break;
      case Elementwise::kBroadcast:
        plan.posts.emplace_back([this, p, n, dt, root](const nc_op_attr_t* a, nc_request_t* r) {
          return nc_broadcast(ctx_, p, p, n, dt, root, comm_, a, r);
        });
        break;
      case Elementwise::kReduce:
        plan.posts.emplace_back(
            [this, p, n, dt, redop, root, written](const nc_op_attr_t* a, nc_request_t* r) {
              return nc_reduce(ctx_, p, written ? p : nullptr, n, dt, redop, root, comm_, a, r);
            });
        break;
    }
  }
  if (kind == Elementwise::kAllreduce && wire.dtype == NC_F32 && wire.per_element == 1 &&
      is_sum_or_avg(op)) {
    plan.compress = options_.compress;
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::allreduce(std::vector<at::Tensor>& tensors,
                                                               const c10d::AllreduceOptions& opts) {
  const auto& t = single(tensors, "allreduce");
  Plan plan;
  plan_elementwise(Elementwise::kAllreduce, t, opts.reduceOp, 0, plan);
  return submit(c10d::OpType::ALLREDUCE, "allreduce",
                shape_text(t, fmt::format(", {}", op_name(opts.reduceOp))), tensors,
                std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "nodecomm: allreduce_coalesced of no tensors");
  Plan plan;
  int64_t total = 0;
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    plan_elementwise(Elementwise::kAllreduce, t, opts.reduceOp, 0, plan);
    total += t.numel();
  }
  return submit(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced",
      fmt::format("({} tensors, {} elements, {})", tensors.size(), total, op_name(opts.reduceOp)),
      tensors, std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::broadcast(std::vector<at::Tensor>& tensors,
                                                               const c10d::BroadcastOptions& opts) {
  const auto& t = single(tensors, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0, "nodecomm: broadcast: rootTensor must be 0");
  check_root(static_cast<int>(opts.rootRank), size_, "broadcast");
  Plan plan;
  plan_elementwise(Elementwise::kBroadcast, t, ReduceOp(), static_cast<int>(opts.rootRank), plan);
  return submit(c10d::OpType::BROADCAST, "broadcast",
                shape_text(t, fmt::format(", root {}", opts.rootRank)), tensors, std::move(plan),
                timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::reduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::ReduceOptions& opts) {
  const auto& t = single(tensors, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "nodecomm: reduce: rootTensor must be 0");
  check_root(static_cast<int>(opts.rootRank), size_, "reduce");
  Plan plan;
  plan_elementwise(Elementwise::kReduce, t, opts.reduceOp, static_cast<int>(opts.rootRank), plan);
  return submit(c10d::OpType::REDUCE, "reduce",
                shape_text(t, fmt::format(", {}, root {}", op_name(opts.reduceOp), opts.rootRank)),
                tensors, std::move(plan), timeout_for(opts.timeout));
}

void ProcessGroupNodecomm::plan_allgather(const std::vector<at::Tensor>& outputs,
                                          const at::Tensor& input, Plan& plan) {
  check_tensor(input, "allgather");
  check_list(outputs, static_cast<size_t>(size_), input, "allgather output list");
  TORCH_CHECK(outputs[static_cast<size_t>(rank_)].numel() == input.numel(),
              "nodecomm: "
              "allgather: this rank's output has ",
              outputs[static_cast<size_t>(rank_)].numel(), " elements, its input ", input.numel());
  const Wire wire = move_wire(input.scalar_type());
  const bool equal = std::all_of(outputs.begin(), outputs.end(),
                                 [&](const at::Tensor& o) { return o.numel() == input.numel(); });
  char* recv = list_buffer(outputs, false, true, plan);
  const size_t recv_bytes = list_bytes(outputs);
  const size_t n = static_cast<size_t>(input.numel()) * wire.per_element;
  const size_t elem = nc_dtype_size(wire.dtype);
  const nc_dtype_t dt = wire.dtype;
  char* send = buffer(input, true, false, plan);
  // In place is the library's convention for equal blocks (input = this rank's block);
  // any other overlap would be read while being written.
  const bool in_place = equal && send == recv + static_cast<size_t>(rank_) * n * elem;
  if (!in_place && overlap(send, input.nbytes(), recv, recv_bytes)) {
    send = buffer(input, true, false, plan, /*force_stage=*/true);
  }
  if (equal) {
    plan.posts.emplace_back([this, send, recv, n, dt](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_allgather(ctx_, send, recv, n, dt, comm_, a, r);
    });
    return;
  }
  std::vector<size_t> counts;
  counts.reserve(outputs.size());
  for (const auto& o : outputs) counts.push_back(static_cast<size_t>(o.numel()) * wire.per_element);
  plan.posts.emplace_back([this, send, recv, n, dt, counts, displs = displacements(counts)](
                              const nc_op_attr_t* a, nc_request_t* r) {
    return nc_allgatherv(ctx_, send, n, recv, counts.data(), displs.data(), dt, comm_, a, r);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const auto& input = single(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "nodecomm: allgather takes one output list, not ",
              outputs.size());
  Plan plan;
  plan_allgather(outputs[0], input, plan);
  return submit(c10d::OpType::ALLGATHER, "allgather", shape_text(input), outputs[0],
                std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensor(input, "_allgather_base");
  check_tensor(output, "_allgather_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "nodecomm: _allgather_base: output ",
              output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "nodecomm: _allgather_base: output has ",
              output.numel(), " elements, expected ", size_, " x ", input.numel());
  Plan plan;
  // The output seen as one block per rank: the same path as the list form.
  at::Tensor flat =
      output.is_contiguous() ? output.view(-1) : stage(output.numel(), output.scalar_type());
  std::vector<at::Tensor> blocks;
  blocks.reserve(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r)
    blocks.push_back(flat.narrow(0, r * input.numel(), input.numel()));
  plan_allgather(blocks, input, plan);
  if (!output.is_contiguous()) {
    plan.keep.push_back(flat);
    plan.copy_back.emplace_back([output, flat] { output.copy_(flat.view(output.sizes())); });
  }
  return submit(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", shape_text(input), {output},
                std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(output_lists.size() == static_cast<size_t>(size_),
              "nodecomm: "
              "allgather_coalesced needs one output list per rank (",
              size_, "), got ", output_lists.size());
  Plan plan;
  std::vector<at::Tensor> value;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<at::Tensor> outputs;
    for (const auto& list : output_lists) {
      TORCH_CHECK(list.size() == inputs.size(),
                  "nodecomm: allgather_coalesced: an output "
                  "list has ",
                  list.size(), " tensors for ", inputs.size(), " inputs");
      outputs.push_back(list[i]);
    }
    plan_allgather(outputs, inputs[i], plan);
  }
  for (const auto& list : output_lists) value.insert(value.end(), list.begin(), list.end());
  return submit(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced",
                fmt::format("({} tensors)", inputs.size()), std::move(value), std::move(plan),
                timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const auto& input = single(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, size_, "gather");
  const Wire wire = move_wire(input.scalar_type());
  const size_t n = static_cast<size_t>(input.numel()) * wire.per_element;
  const nc_dtype_t dt = wire.dtype;
  Plan plan;
  char* send = buffer(input, true, false, plan);
  char* recv = nullptr;
  std::vector<at::Tensor> value;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "nodecomm: gather: the root takes one output list, not ",
                outputs.size());
    check_list(outputs[0], static_cast<size_t>(size_), input, "gather output list");
    for (const auto& o : outputs[0]) {
      TORCH_CHECK(o.numel() == input.numel(), "nodecomm: gather: every output needs ",
                  input.numel(), " elements (the input's), one has ", o.numel());
    }
    recv = list_buffer(outputs[0], false, true, plan);
    const bool in_place = send == recv + static_cast<size_t>(root) * input.nbytes();
    if (!in_place && overlap(send, input.nbytes(), recv, list_bytes(outputs[0]))) {
      send = buffer(input, true, false, plan, /*force_stage=*/true);
    }
    value = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "nodecomm: gather: only the root (rank ", root, ") takes an output list");
  }
  plan.posts.emplace_back([this, send, recv, n, dt, root](const nc_op_attr_t* a, nc_request_t* r) {
    return nc_gather(ctx_, send, recv, n, dt, root, comm_, a, r);
  });
  return submit(c10d::OpType::GATHER, "gather", shape_text(input, fmt::format(", root {}", root)),
                std::move(value), std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const auto& output = single(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  check_root(root, size_, "scatter");
  const Wire wire = move_wire(output.scalar_type());
  const size_t n = static_cast<size_t>(output.numel()) * wire.per_element;
  const nc_dtype_t dt = wire.dtype;
  Plan plan;
  char* recv = buffer(output, false, true, plan);
  char* send = nullptr;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "nodecomm: scatter: the root takes one input list, not ",
                inputs.size());
    check_list(inputs[0], static_cast<size_t>(size_), output, "scatter input list");
    for (const auto& in : inputs[0]) {
      TORCH_CHECK(in.numel() == output.numel(), "nodecomm: scatter: every input needs ",
                  output.numel(), " elements (the output's), one has ", in.numel());
    }
    send = list_buffer(inputs[0], true, false, plan);
    const bool in_place = recv == send + static_cast<size_t>(root) * output.nbytes();
    if (!in_place && overlap(send, list_bytes(inputs[0]), recv, output.nbytes())) {
      send = list_buffer(inputs[0], true, false, plan, /*force_stage=*/true);
    }
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "nodecomm: scatter: only the root (rank ", root, ") takes an input list");
  }
  plan.posts.emplace_back([this, send, recv, n, dt, root](const nc_op_attr_t* a, nc_request_t* r) {
    return nc_scatter(ctx_, send, recv, n, dt, root, comm_, a, r);
  });
  return submit(c10d::OpType::SCATTER, "scatter",
                shape_text(output, fmt::format(", root {}", root)), outputs, std::move(plan),
                timeout_for(opts.timeout));
}

namespace {
// reduce_scatter's one post, shared by the list and the flat form: `send` holds size blocks
// of `output`'s element count.
void plan_reduce_scatter_post(Plan& plan, nc_context_t* ctx, nc_comm_t comm, char* send, char* recv,
                              size_t n, Wire wire, nc_redop_t redop) {
  plan.posts.emplace_back([=](const nc_op_attr_t* a, nc_request_t* r) {
    return nc_reduce_scatter(ctx, send, recv, n, wire.dtype, redop, comm, a, r);
  });
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const auto& output = single(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "nodecomm: reduce_scatter takes one input list, not ",
              inputs.size());
  check_list(inputs[0], static_cast<size_t>(size_), output, "reduce_scatter input list");
  for (const auto& in : inputs[0]) {
    TORCH_CHECK(in.numel() == output.numel(), "nodecomm: reduce_scatter: every input needs ",
                output.numel(), " elements (the output's), one has ", in.numel());
  }
  const Wire wire = reduce_wire(output.scalar_type(), opts.reduceOp);
  const size_t n = static_cast<size_t>(output.numel()) * wire.per_element;
  Plan plan;
  char* send = list_buffer(inputs[0], true, false, plan);
  char* recv = buffer(output, false, true, plan);
  const bool in_place = recv == send + static_cast<size_t>(rank_) * output.nbytes();
  if (!in_place && overlap(send, list_bytes(inputs[0]), recv, output.nbytes())) {
    recv = buffer(output, false, true, plan, /*force_stage=*/true);
  }
  plan_reduce_scatter_post(plan, ctx_, comm_, send, recv, n, wire, to_redop(opts.reduceOp));
  return submit(c10d::OpType::REDUCE_SCATTER, "reduce_scatter",
                shape_text(output, fmt::format(", {}", op_name(opts.reduceOp))), outputs,
                std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(input, "_reduce_scatter_base");
  check_tensor(output, "_reduce_scatter_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "nodecomm: _reduce_scatter_base: "
              "output ",
              output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "nodecomm: _reduce_scatter_base: input "
              "has ",
              input.numel(), " elements, expected ", size_, " x ", output.numel());
  const Wire wire = reduce_wire(output.scalar_type(), opts.reduceOp);
  const size_t n = static_cast<size_t>(output.numel()) * wire.per_element;
  Plan plan;
  char* send = buffer(input, true, false, plan);
  char* recv = buffer(output, false, true, plan);
  const bool in_place = recv == send + static_cast<size_t>(rank_) * output.nbytes();
  if (!in_place && overlap(send, input.nbytes(), recv, output.nbytes())) {
    recv = buffer(output, false, true, plan, /*force_stage=*/true);
  }
  plan_reduce_scatter_post(plan, ctx_, comm_, send, recv, n, wire, to_redop(opts.reduceOp));
  return submit(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base",
                shape_text(output, fmt::format(", {}", op_name(opts.reduceOp))), {output},
                std::move(plan), timeout_for(opts.timeout));
}

namespace {
// alltoallv's one post, shared by all_to_all_single with split sizes and the list form: the
// counts are copied into the post, and the displacements pack the blocks back to back.
void plan_alltoallv_post(Plan& plan, nc_context_t* ctx, nc_comm_t comm, char* send,
                         std::vector<size_t> send_counts, char* recv,
                         std::vector<size_t> recv_counts, nc_dtype_t dt) {
  plan.posts.emplace_back(
      [=, send_displs = displacements(send_counts), recv_displs = displacements(recv_counts)](
          const nc_op_attr_t* a, nc_request_t* r) {
        return nc_alltoallv(ctx, send, send_counts.data(), send_displs.data(), recv,
                            recv_counts.data(), recv_displs.data(), dt, comm, a, r);
      });
}

int64_t row_elements(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}
}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_tensor(input, "alltoall_base");
  check_tensor(output, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(),
              "nodecomm: all_to_all_single: "
              "output ",
              output.scalar_type(), ", input ", input.scalar_type());
  TORCH_CHECK(input.dim() > 0 && output.dim() > 0,
              "nodecomm: all_to_all_single needs tensors with at least one dimension");
  const Wire wire = move_wire(input.scalar_type());
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  try {
    send_counts = split_counts(input_splits, size_, input.size(0),
                               static_cast<size_t>(row_elements(input)) * wire.per_element,
                               "all_to_all_single input");
    recv_counts = split_counts(output_splits, size_, output.size(0),
                               static_cast<size_t>(row_elements(output)) * wire.per_element,
                               "all_to_all_single output");
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, e.what());
  }
  Plan plan;
  char* recv = buffer(output, false, true, plan);
  char* send = buffer(input, true, false, plan);
  if (overlap(send, input.nbytes(), recv, output.nbytes())) {
    send = buffer(input, true, false, plan, /*force_stage=*/true);
  }
  const nc_dtype_t dt = wire.dtype;
  const bool equal = std::all_of(send_counts.begin(), send_counts.end(),
                                 [&](size_t c) { return c == send_counts[0]; }) &&
                     send_counts == recv_counts;
  if (equal) {
    const size_t n = send_counts[0];
    plan.posts.emplace_back([this, send, recv, n, dt](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_alltoall(ctx_, send, recv, n, dt, comm_, a, r);
    });
  } else {
    plan_alltoallv_post(plan, ctx_, comm_, send, send_counts, recv, recv_counts, dt);
  }
  return submit(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", shape_text(input), {output},
                std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::alltoall(std::vector<at::Tensor>& outputs,
                                                              std::vector<at::Tensor>& inputs,
                                                              const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(!inputs.empty(), "nodecomm: all_to_all of no tensors");
  check_list(inputs, static_cast<size_t>(size_), inputs[0], "all_to_all input list");
  check_list(outputs, static_cast<size_t>(size_), inputs[0], "all_to_all output list");
  const Wire wire = move_wire(inputs[0].scalar_type());
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  send_counts.reserve(inputs.size());
  recv_counts.reserve(outputs.size());
  for (const auto& t : inputs)
    send_counts.push_back(static_cast<size_t>(t.numel()) * wire.per_element);
  for (const auto& t : outputs)
    recv_counts.push_back(static_cast<size_t>(t.numel()) * wire.per_element);
  Plan plan;
  char* recv = list_buffer(outputs, false, true, plan);
  char* send = list_buffer(inputs, true, false, plan);
  if (overlap(send, list_bytes(inputs), recv, list_bytes(outputs))) {
    send = list_buffer(inputs, true, false, plan, /*force_stage=*/true);
  }
  const nc_dtype_t dt = wire.dtype;
  plan_alltoallv_post(plan, ctx_, comm_, send, send_counts, recv, recv_counts, dt);
  return submit(
      c10d::OpType::ALLTOALL, "all_to_all",
      fmt::format("({} tensors of {})", inputs.size(), c10::toString(inputs[0].scalar_type())),
      outputs, std::move(plan), timeout_for(opts.timeout));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupNodecomm::barrier(const c10d::BarrierOptions& opts) {
  Plan plan;
  plan.posts.emplace_back(
      [this](const nc_op_attr_t* a, nc_request_t* r) { return nc_barrier(ctx_, comm_, a, r); });
  return submit(c10d::OpType::BARRIER, "barrier", "()", {}, std::move(plan),
                timeout_for(opts.timeout));
}

// As gloo's: through the store, so that rank 0 can name the ranks that did not arrive
// (a nodecomm barrier only knows that it did not complete); then a nodecomm barrier, so the
// group's operations are fenced as well.
void ProcessGroupNodecomm::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const auto timeout = timeout_for(opts.timeout);
  const std::string base = fmt::format("nodecomm/monitored_barrier/{}/", monitored_barriers_++);
  const std::string where =
      fmt::format("rank {}/{}: monitored_barrier on group '{}'", rank_, size_, name_);
  if (rank_ != 0) {
    store_->set(base + std::to_string(rank_), {1});
    try {
      store_->wait({base + "done"}, timeout);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "nodecomm: ", where, ": rank 0 did not release it within ",
                  timeout.count(), " ms: ", e.what());
    }
  } else {
    const auto deadline = Clock::now() + timeout;
    std::vector<int> missing;
    for (int r = 1; r < size_; ++r) {
      const auto left =
          std::max(std::chrono::milliseconds(1),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      try {
        store_->wait({base + std::to_string(r)}, left);
      } catch (const std::exception&) {
        missing.push_back(r);
        if (!wait_all_ranks) break;
      }
    }
    TORCH_CHECK(missing.empty(), "nodecomm: ", where, ": rank", missing.size() > 1 ? "s " : " ",
                fmt::format("{}", fmt::join(missing, ", ")), " did not reach the barrier within ",
                timeout.count(), " ms");
    store_->set(base + "done", {1});
  }
  c10d::BarrierOptions fence;
  fence.timeout = timeout;
  barrier(fence)->wait();
}

}  // namespace nodecomm::torch_backend
