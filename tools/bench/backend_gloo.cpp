// The Gloo backend: Gloo's own collectives (Debian's libgloo, TCP transport) among the ranks of
// an mpirun, the baseline PyTorch users know as the gloo process group. It uses no MPI: mpirun
// (or nodecomm-launch --backend gloo) only starts the processes, which find each other through
// a file store. Like torch's ProcessGroupGloo, every call runs on a worker thread, in the order
// posted, so post() is non-blocking for every collective and run() is post() plus wait().
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "backend.hpp"
#include "baseline.hpp"
#include "check.hpp"
#include "host_reduce.hpp"
#include "launch_env.hpp"

namespace nodecomm::bench {
namespace {

// Long enough for the largest sweep sizes on a slow simulated link; a dead peer is reported by
// mpirun (which stops the job when a rank exits non-zero) well before this.
constexpr std::chrono::seconds kGlooTimeout{600};
// post() returns 0 (the caller completes one of its own first) beyond this many in flight.
constexpr size_t kMaxInFlight = 4096;

// The storage type Gloo sees for a dtype: its own float16 for f16, so that its reductions
// apply; bf16 as raw 16-bit words with ours.
template <class F>
void with_storage(nc_dtype_t dtype, F&& f) {
  switch (dtype) {
    case NC_F32:
      return f(float{});
    case NC_F64:
      return f(double{});
    case NC_I32:
      return f(int32_t{});
    case NC_I64:
      return f(int64_t{});
    case NC_I8:
      return f(int8_t{});
    case NC_U8:
      return f(uint8_t{});
    case NC_F16:
      return f(gloo::float16{});
    case NC_BF16:
      return f(uint16_t{});
  }
  throw BackendError(fmt::format("unsupported dtype {}", static_cast<int>(dtype)));
}

using ReduceFn = std::function<void(void*, const void*, const void*, size_t)>;
using GlooFn = void (*)(void*, const void*, const void*, size_t);

// Gloo's own element-wise functions where it has them (what a Gloo user gets), ours for bf16.
// Average is a sum, divided afterwards as MPI's baseline does.
template <class T>
ReduceFn reduce_fn(nc_dtype_t dtype, nc_redop_t op) {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return [dtype, op](void* c, const void* a, const void* b, size_t n) {
      combine(dtype, op, c, a, b, n);
    };
  } else {
    switch (op) {
      case NC_PROD:
        return static_cast<GlooFn>(&gloo::product<T>);
      case NC_MIN:
        return static_cast<GlooFn>(&gloo::min<T>);
      case NC_MAX:
        return static_cast<GlooFn>(&gloo::max<T>);
      case NC_SUM:
      case NC_AVG:
        break;
    }
    return static_cast<GlooFn>(&gloo::sum<T>);
  }
}

// ReduceScatterHalvingDoubling takes a ReductionFunction<T>, a plain function pointer: one per
// (storage type, redop), through combine() (dtype_of maps the storage type back).
template <class T>
constexpr nc_dtype_t dtype_of() {
  if constexpr (std::is_same_v<T, float>) return NC_F32;
  if constexpr (std::is_same_v<T, double>) return NC_F64;
  if constexpr (std::is_same_v<T, int32_t>) return NC_I32;
  if constexpr (std::is_same_v<T, int64_t>) return NC_I64;
  if constexpr (std::is_same_v<T, int8_t>) return NC_I8;
  if constexpr (std::is_same_v<T, uint8_t>) return NC_U8;
  if constexpr (std::is_same_v<T, gloo::float16>) return NC_F16;
  return NC_BF16;
}

template <class T, nc_redop_t Op>
void combine_into(T* x, const T* y, size_t n) {
  combine(dtype_of<T>(), Op, x, x, y, n);
}

template <class T>
std::unique_ptr<gloo::ReductionFunction<T>> reduction_function(nc_redop_t op) {
  using Fn = gloo::ReductionFunction<T>;
  switch (op) {
    case NC_PROD:
      return std::make_unique<Fn>(gloo::CUSTOM, &combine_into<T, NC_PROD>);
    case NC_MIN:
      return std::make_unique<Fn>(gloo::CUSTOM, &combine_into<T, NC_MIN>);
    case NC_MAX:
      return std::make_unique<Fn>(gloo::CUSTOM, &combine_into<T, NC_MAX>);
    case NC_SUM:
    case NC_AVG:
      break;
  }
  return std::make_unique<Fn>(gloo::CUSTOM, &combine_into<T, NC_SUM>);
}

// The first of several environment variables that is set; empty if none is.
std::string first_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return value;
  }
  return {};
}

int env_int(std::initializer_list<const char*> names, const char* what) {
  const std::string text = first_env(names);
  if (text.empty()) {
    throw BackendError(fmt::format(
        "no {} in the environment (OMPI_COMM_WORLD_RANK/SIZE as mpirun sets them, or "
        "RANK/WORLD_SIZE as torchrun does): run it under nodecomm-launch --backend gloo or "
        "mpirun",
        what));
  }
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (*end != '\0' || value < 0 || value > INT32_MAX) {
    throw BackendError(fmt::format("{} '{}' is not a number", what, text));
  }
  return static_cast<int>(value);
}

bool is_prefix_sum(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (displs[i] != at) return false;
    at += counts[i];
  }
  return true;
}

// Runs the calls posted to it one at a time, in order, on its own thread.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() { stop(); }

  // 0 when kMaxInFlight calls are already queued or running.
  Pending post(std::function<void()> fn) {
    std::lock_guard lock(mu_);
    if (jobs_.size() >= kMaxInFlight) return 0;
    const Pending id = next_++;
    jobs_.emplace(id, Job{std::move(fn), false, nullptr});
    queue_.push_back(id);
    work_.notify_one();
    return id;
  }

  // Nothing queued or running: the poster may run a call itself, in order.
  bool idle() {
    std::lock_guard lock(mu_);
    return jobs_.empty();
  }

  bool test(Pending id) {
    std::unique_lock lock(mu_);
    if (!job(id).done) return false;
    release(id, lock);
    return true;
  }

  void wait(Pending id) {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return job(id).done; });
    release(id, lock);
  }

  void stop() noexcept {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      work_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Job {
    std::function<void()> fn;
    bool done = false;
    std::exception_ptr error;
  };

  Job& job(Pending id) {
    const auto it = jobs_.find(id);
    if (it == jobs_.end()) throw BackendError(fmt::format("no such pending operation {}", id));
    return it->second;
  }

  // Forgets a finished job and rethrows its failure, if any.
  void release(Pending id, std::unique_lock<std::mutex>& lock) {
    const auto it = jobs_.find(id);
    const std::exception_ptr error = it->second.error;
    jobs_.erase(it);
    lock.unlock();
    if (error) std::rethrow_exception(error);
  }

  void loop() {
    std::unique_lock lock(mu_);
    while (true) {
      work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      const Pending id = queue_.front();
      queue_.pop_front();
      std::function<void()> fn = std::move(jobs_.at(id).fn);
      lock.unlock();
      std::exception_ptr error;
      try {
        fn();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      Job& j = jobs_.at(id);
      j.done = true;
      j.error = error;
      done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_;
  std::condition_variable done_;
  std::map<Pending, Job> jobs_;
  std::deque<Pending> queue_;
  Pending next_ = 1;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts once everything above exists
};

class GlooBackend final : public BaselineBackend {
 public:
  GlooBackend() {
    rank_ = env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "RANK"}, "rank");
    size_ = env_int({"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"}, "world size");
    if (size_ < 1 || rank_ >= size_) {
      throw BackendError(fmt::format("rank {} is not in a world of {}", rank_, size_));
    }
    std::string store_dir = first_env({"NODECOMM_GLOO_STORE"});
    if (store_dir.empty()) {
      // A plain mpirun on one machine: a directory per job, removed by rank 0 at the end.
      const std::string job = first_env({"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid"});
      if (job.empty()) {
        throw BackendError(
            "NODECOMM_GLOO_STORE is not set: name a directory that every rank can reach for "
            "Gloo's file-store rendezvous (nodecomm-launch --backend gloo sets it)");
      }
      const std::string tmp = first_env({"TMPDIR"});
      store_dir = fmt::format("{}/nodecomm-gloo-{}", tmp.empty() ? "/tmp" : tmp, job);
      owned_store_dir_ = store_dir;
    }
    std::error_code ec;
    std::filesystem::create_directories(store_dir, ec);
    if (ec) {
      throw BackendError(
          fmt::format("cannot create Gloo's store directory {}: {}", store_dir, ec.message()));
    }
    store_ = std::make_unique<gloo::rendezvous::FileStore>(store_dir);

    gloo::transport::tcp::attr attr;
    // torch's variable: the interface Gloo binds to (eth0 in a --netsim namespace).
    attr.iface = first_env({"GLOO_SOCKET_IFNAME"});
    if (attr.iface.empty()) attr.hostname = first_env({"GLOO_SOCKET_HOSTNAME"});
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      world_ = connect(rank_, size_, *store_);
    } catch (const std::exception& e) {
      throw BackendError(fmt::format("Gloo rendezvous in {} (rank {} of {}): {}", store_dir, rank_,
                                     size_, e.what()));
    }

    const LaunchLayout layout = launch_layout(size_);
    if (layout.nodes > 0) {
      nodes_ = layout.nodes;
      local_size_ = layout.local_size;
      node_index_ = layout.node >= 0 ? layout.node : rank_ / local_size_;
    } else {
      local_size_ = std::max(1, env_count("OMPI_COMM_WORLD_LOCAL_SIZE", size_));
      nodes_ = (size_ + local_size_ - 1) / local_size_;
      node_index_ = rank_ / local_size_;
    }
    group_ = world_;
    group_rank_ = rank_;
    group_size_ = size_;
  }

  ~GlooBackend() override { finalize(true); }

  std::string_view name() const override { return "gloo"; }
  int world_rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int node_count() const override { return nodes_; }
  int local_size() const override { return local_size_; }
  int group_rank() const override { return group_rank_; }
  int group_size() const override { return group_size_; }

  void split(int color, int key) override {
    complete(worker_.post([this, color, key] { split_now(color, key); }));
  }

  // A blocking call with nothing in flight runs on the calling thread: the same order as
  // through the worker, without two thread hand-offs on the latency path.
  void run(const Call& call) override {
    if (worker_.idle()) return execute(call, next_tag_++);
    complete(post(call));
  }

  Pending post(const Call& call) override {
    // The counts outlive the caller's Call: copy them into the job.
    std::optional<CollectiveCase::VectorArgs> vector;
    if (call.vector != nullptr) vector = *call.vector;
    Call c = call;
    c.attr = nullptr;  // nothing in Gloo to carry priorities or names
    const uint32_t tag = next_tag_++;
    return worker_.post([this, c, vector = std::move(vector), tag]() mutable {
      c.vector = vector ? &*vector : nullptr;
      execute(c, tag);
    });
  }

  bool test(Pending pending) override { return worker_.test(pending); }
  void wait(Pending pending) override { worker_.wait(pending); }
  void wait_all(std::span<Pending> pending) override {
    std::exception_ptr first;
    for (Pending& p : pending) {
      if (p == 0) continue;
      try {
        worker_.wait(p);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
      p = 0;
    }
    if (first) std::rethrow_exception(first);
  }

  int node_index() const override { return node_index_; }

  void sync() override { run({Collective::kBarrier}); }

  void finalize(bool ok) noexcept override {
    if (finalized_) return;
    finalized_ = true;
    if (ok && !owned_store_dir_.empty()) {
      // Everyone has read the store once the barrier passes.
      try {
        sync();
        if (rank_ == 0) {
          std::error_code ec;
          std::filesystem::remove_all(owned_store_dir_, ec);
        }
      } catch (const std::exception&) {
        // Leaves the directory behind; nothing else depends on it.
      }
    }
    // After a failure the peers' calls time out, or mpirun stops them when this rank exits
    // non-zero; Gloo has no abort.
    worker_.stop();
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> connect(int rank, int size,
                                                     gloo::rendezvous::Store& store) {
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(kGlooTimeout);
    context->connectFullMesh(store, device_);
    return context;
  }

  void complete(Pending pending) {
    if (pending == 0) throw BackendError("too many Gloo operations in flight");
    worker_.wait(pending);
  }

  // On the worker thread.
  void split_now(int color, int key) {
    std::vector<int32_t> mine{color, key};
    std::vector<int32_t> all(2 * static_cast<size_t>(size_));
    if (size_ == 1) {
      all = mine;
    } else {
      gloo::AllgatherOptions o(world_);
      o.setInput(mine.data(), mine.size());
      o.setOutput(all.data(), all.size());
      o.setTag(next_tag_++);
      gloo::allgather(o);
    }
    // MPI_Comm_split's order: by key, then by world rank.
    std::vector<int> members;
    for (int r = 0; r < size_; ++r) {
      if (all[2 * static_cast<size_t>(r)] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[2 * static_cast<size_t>(a) + 1] < all[2 * static_cast<size_t>(b) + 1];
    });
    group_size_ = static_cast<int>(members.size());
    group_rank_ =
        static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    split_store_ =
        std::make_unique<gloo::rendezvous::PrefixStore>(fmt::format("split-{}", color), *store_);
    group_ = connect(group_rank_, group_size_, *split_store_);
  }

  // One collective on the worker thread, with nccl-tests' buffer conventions (backend.hpp).
  void execute(const Call& c, uint32_t tag) {
    const auto& ctx = c.in_group ? group_ : world_;
    const int p = ctx->size;
    const int me = ctx->rank;
    const size_t elem = dtype_bytes(c.dtype);
    const size_t n = c.count;
    auto* send = static_cast<uint8_t*>(const_cast<void*>(c.send));
    auto* recv = static_cast<uint8_t*>(c.recv);
    if (c.collective == Collective::kBarrier) {
      if (p > 1) {
        gloo::BarrierOptions o(ctx);
        o.setTag(tag);
        gloo::barrier(o);
      }
      return;
    }
    if (p == 1) return single_rank(c, elem);
    with_storage(c.dtype, [&](auto zero) {
      using T = decltype(zero);
      T* in = reinterpret_cast<T*>(send);
      T* out = reinterpret_cast<T*>(recv);
      switch (c.collective) {
        case Collective::kAllreduce: {
          if (n == 0) return;
          gloo::AllreduceOptions o(ctx);
          if (!c.inplace) o.setInput(in, n);
          o.setOutput(out, n);
          o.setReduceFunction(reduce_fn<T>(c.dtype, c.op));
          o.setTag(tag);
          gloo::allreduce(o);
          if (c.op == NC_AVG) divide_average(recv, n, c.dtype, p);
          return;
        }
        case Collective::kReduce: {
          if (n == 0) return;
          gloo::ReduceOptions o(ctx);
          // Gloo reduces into the output on every rank: the others get a scratch one, so
          // that their buffers stay as nccl-tests leaves them.
          T* target = out;
          if (me != c.root) target = reinterpret_cast<T*>(scratch(n * elem));
          if (!(c.inplace && me == c.root)) o.setInput(in, n);
          o.setOutput(target, n);
          o.setRoot(c.root);
          o.setReduceFunction(reduce_fn<T>(c.dtype, c.op));
          o.setTag(tag);
          gloo::reduce(o);
          if (c.op == NC_AVG && me == c.root) divide_average(recv, n, c.dtype, p);
          return;
        }
        case Collective::kBroadcast: {
          gloo::BroadcastOptions o(ctx);
          if (me == c.root && !c.inplace) o.setInput(in, n);
          o.setOutput(out, n);
          o.setRoot(c.root);
          o.setTag(tag);
          gloo::broadcast(o);
          return;
        }
        case Collective::kReduceScatter:
          return reduce_scatter<T>(c, ctx, p);
        case Collective::kAllgather: {
          gloo::AllgatherOptions o(ctx);
          if (!c.inplace) o.setInput(in, n);
          o.setOutput(out, n * static_cast<size_t>(p));
          o.setTag(tag);
          gloo::allgather(o);
          return;
        }
        case Collective::kGather: {
          gloo::GatherOptions o(ctx);
          // In place the root's block is already where Gloo would copy it from: a copy of
          // it as the input keeps Gloo's memcpy from overlapping itself.
          T* input = in;
          if (c.inplace && me == c.root) {
            input = reinterpret_cast<T*>(scratch(n * elem));
            std::memcpy(static_cast<void*>(input), recv + static_cast<size_t>(me) * n * elem,
                        n * elem);
          }
          o.setInput(input, n);
          if (me == c.root) o.setOutput(out, n * static_cast<size_t>(p));
          o.setRoot(c.root);
          o.setTag(tag);
          gloo::gather(o);
          return;
        }
        case Collective::kScatter: {
          gloo::ScatterOptions o(ctx);
          std::vector<T*> blocks;
          if (me == c.root) {
            for (int r = 0; r < p; ++r) blocks.push_back(in + static_cast<size_t>(r) * n);
            o.setInputs(blocks, n);
          }
          // In place the root's output is its own input block: a scratch output, as for gather.
          T* target = c.inplace && me == c.root ? reinterpret_cast<T*>(scratch(n * elem)) : out;
          o.setOutput(target, n);
          o.setRoot(c.root);
          o.setTag(tag);
          gloo::scatter(o);
          return;
        }
        case Collective::kAlltoall: {
          gloo::AlltoallOptions o(ctx);
          o.setInput(in, n * static_cast<size_t>(p));
          o.setOutput(out, n * static_cast<size_t>(p));
          o.setTag(tag);
          gloo::alltoall(o);
          return;
        }
        case Collective::kAllgatherv:
          return allgatherv<T>(c, ctx, tag, elem);
        case Collective::kAlltoallv:
          return alltoallv<T>(c, ctx, tag, elem);
        case Collective::kBarrier:
          return;
      }
    });
  }

  // One rank: the data movement of each collective with itself (Gloo needs a peer).
  static void single_rank(const Call& c, size_t elem) {
    const size_t bytes = c.count * elem;
    switch (c.collective) {
      case Collective::kAllgatherv:
        if (c.vector != nullptr && !c.vector->recv_displs.empty()) {
          std::memmove(static_cast<uint8_t*>(c.recv) + c.vector->recv_displs[0] * elem, c.send,
                       c.vector->send_count * elem);
        }
        return;
      case Collective::kAlltoallv:
        if (c.vector != nullptr && !c.vector->recv_displs.empty()) {
          std::memmove(static_cast<uint8_t*>(c.recv) + c.vector->recv_displs[0] * elem,
                       static_cast<const uint8_t*>(c.send) + c.vector->send_displs[0] * elem,
                       c.vector->recv_counts[0] * elem);
        }
        return;
      default:
        if (c.send != c.recv && c.send != nullptr && c.recv != nullptr) {
          std::memmove(c.recv, c.send, bytes);
        }
        return;  // an average over one rank is the value itself
    }
  }

  // Gloo's reduce-scatter is its halving-doubling algorithm object, in place on one buffer of
  // p blocks, set up once per buffer and shape (as a Gloo user would keep it). The input is
  // copied into that buffer and the rank's block out of it.
  template <class T>
  void reduce_scatter(const Call& c, const std::shared_ptr<gloo::rendezvous::Context>& ctx, int p) {
    const size_t n = c.count;
    if (n == 0) return;
    if (n > static_cast<size_t>(INT32_MAX) / static_cast<size_t>(p)) {
      throw BackendError(
          fmt::format("reduce_scatter: {} elements per rank exceed Gloo's int "
                      "count",
                      n));
    }
    const RsKey key{c.in_group, c.dtype, c.op, n};
    if (!rs_ || !(rs_->key == key)) {
      rs_.reset();
      auto state = std::make_unique<RsState>();
      state->key = key;
      state->buffer.resize(n * static_cast<size_t>(p) * sizeof(T));
      auto fn = reduction_function<T>(c.op);
      std::vector<T*> ptrs{reinterpret_cast<T*>(state->buffer.data())};
      state->algorithm = std::make_unique<gloo::ReduceScatterHalvingDoubling<T>>(
          ctx, ptrs, static_cast<int>(n) * p,
          std::vector<int>(static_cast<size_t>(p), static_cast<int>(n)), fn.get());
      state->function = std::shared_ptr<void>(
          fn.release(), [](void* f) { delete static_cast<gloo::ReductionFunction<T>*>(f); });
      rs_ = std::move(state);
    }
    const size_t block = n * sizeof(T);
    std::memcpy(rs_->buffer.data(), c.send, block * static_cast<size_t>(p));
    rs_->algorithm->run();
    // The algorithm leaves this rank's reduced block at the start of its buffer.
    std::memcpy(c.recv, rs_->buffer.data(), block);
    if (c.op == NC_AVG) divide_average(c.recv, n, c.dtype, p);
  }

  template <class T>
  void allgatherv(const Call& c, const std::shared_ptr<gloo::rendezvous::Context>& ctx,
                  uint32_t tag, size_t elem) {
    if (c.vector == nullptr) throw BackendError("allgatherv: no counts");
    const auto& v = *c.vector;
    // Gloo's output is the runs back to back; where the caller's have gaps, a scratch one.
    const bool direct = is_prefix_sum(v.recv_counts, v.recv_displs);
    const size_t total = std::accumulate(v.recv_counts.begin(), v.recv_counts.end(), size_t{0});
    auto* out = direct ? static_cast<uint8_t*>(c.recv) : scratch(total * elem);
    gloo::AllgathervOptions o(ctx);
    o.setInput(reinterpret_cast<T*>(const_cast<void*>(c.send)), v.send_count);
    o.setOutput(reinterpret_cast<T*>(out), v.recv_counts);
    o.setTag(tag);
    gloo::allgatherv(o);
    if (!direct) unpack(out, v.recv_counts, v.recv_displs, c.recv, elem);
  }

  template <class T>
  void alltoallv(const Call& c, const std::shared_ptr<gloo::rendezvous::Context>& ctx, uint32_t tag,
                 size_t elem) {
    if (c.vector == nullptr) throw BackendError("alltoallv: no counts");
    const auto& v = *c.vector;
    if (!is_prefix_sum(v.send_counts, v.send_displs)) {
      throw BackendError("alltoallv: Gloo takes the send runs back to back only");
    }
    const bool direct = is_prefix_sum(v.recv_counts, v.recv_displs);
    const size_t total = std::accumulate(v.recv_counts.begin(), v.recv_counts.end(), size_t{0});
    auto* out = direct ? static_cast<uint8_t*>(c.recv) : scratch(total * elem);
    std::vector<int64_t> send_counts(v.send_counts.begin(), v.send_counts.end());
    std::vector<int64_t> recv_counts(v.recv_counts.begin(), v.recv_counts.end());
    gloo::AlltoallvOptions o(ctx);
    o.setInput(reinterpret_cast<T*>(const_cast<void*>(c.send)), send_counts);
    o.setOutput(reinterpret_cast<T*>(out), recv_counts);
    o.setTag(tag);
    gloo::alltoallv(o);
    if (!direct) unpack(out, v.recv_counts, v.recv_displs, c.recv, elem);
  }

  static void unpack(const uint8_t* packed, const std::vector<size_t>& counts,
                     const std::vector<size_t>& displs, void* recv, size_t elem) {
    size_t at = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      std::memcpy(static_cast<uint8_t*>(recv) + displs[i] * elem, packed + at * elem,
                  counts[i] * elem);
      at += counts[i];
    }
  }

  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

  struct RsKey {
    bool in_group;
    nc_dtype_t dtype;
    nc_redop_t op;
    size_t count;
    bool operator==(const RsKey&) const = default;
  };
  struct RsState {
    RsKey key{};
    std::vector<uint8_t> buffer;
    std::shared_ptr<void> function;              // the ReductionFunction<T> the algorithm points to
    std::unique_ptr<gloo::Algorithm> algorithm;  // declared last: destroyed first
  };

  int rank_ = 0;
  int size_ = 1;
  int nodes_ = 1;
  int local_size_ = 1;
  int node_index_ = 0;
  int group_rank_ = 0;
  int group_size_ = 1;
  bool finalized_ = false;
  std::string owned_store_dir_;  // removed at the end when this backend made it up
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::unique_ptr<gloo::rendezvous::Store> split_store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> world_;
  std::shared_ptr<gloo::rendezvous::Context> group_;  // split()'s; the world before it
  // Tags tell concurrent operations apart in Gloo; every rank posts in the same order, so the
  // counters agree. Only the posting thread and, during split(), the worker touch it, never
  // at once (split waits for its job).
  uint32_t next_tag_ = 1;
  // Used by whichever thread runs the call: the worker, or the poster while the worker is idle.
  std::vector<uint8_t> scratch_;
  std::unique_ptr<RsState> rs_;
  Worker worker_;  // last: stopped (joined) before the contexts go
};

}  // namespace

std::unique_ptr<Backend> make_gloo_backend() {
  return std::make_unique<GlooBackend>();
}

}  // namespace nodecomm::bench
