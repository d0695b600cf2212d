// The in-memory transport (transport_inmemory.hpp), in four parts that map onto the narrowed
// transport's pieces: node groups, point to point, native collectives, notices and liveness.
#include "inmemory/transport_inmemory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "net/p2p.hpp"

namespace nodecomm::daemon {

// ---- native collectives: what one member posted -------------------------------------------

enum class NativeKind : uint8_t {
  kAllreduce,
  kReduce,
  kReduceScatter,
  kBroadcast,
  kAllgatherv,
  kGatherv,
  kScatterv,
  kBarrier,
  kSplit
};

namespace {

const char* kind_name(NativeKind k) {
  switch (k) {
    case NativeKind::kAllreduce:
      return "allreduce";
    case NativeKind::kReduce:
      return "reduce";
    case NativeKind::kReduceScatter:
      return "reduce_scatter";
    case NativeKind::kBroadcast:
      return "broadcast";
    case NativeKind::kAllgatherv:
      return "allgatherv";
    case NativeKind::kGatherv:
      return "gatherv";
    case NativeKind::kScatterv:
      return "scatterv";
    case NativeKind::kBarrier:
      return "barrier";
    default:
      return "split";
  }
}

struct Post {
  NativeKind kind = NativeKind::kBarrier;
  uint8_t* buffer = nullptr;  // in place
  size_t count = 0;           // elements (reductions) or bytes
  proto::DType dtype = proto::DType::kU8;
  proto::RedOp op = proto::RedOp::kSum;
  uint32_t root = 0;
  std::vector<size_t> sizes;  // per rank: counts (reduce_scatter) or bytes (v variants)
  std::vector<size_t> displs;
  std::vector<bool> include;  // split
};

}  // namespace

struct InMemoryGroup;

// One native collective of a group: the members' posts, filled in start order.
struct NativeSlot {
  std::vector<Post> posts;  // by group rank
  std::vector<bool> posted;
  uint32_t count = 0;
  bool complete = false;
  std::string error;
  std::vector<std::shared_ptr<InMemoryGroup>> made;  // split: one per include entry
};

// ---- node groups --------------------------------------------------------------------------

// The daemons of one NodeComm, shared by its members.
struct InMemoryGroup {
  std::vector<uint32_t> members;  // world node of each group rank
  // Native collectives by start index; a slot leaves once every member posted to it.
  std::map<uint64_t, std::shared_ptr<NativeSlot>> slots;
  // Point to point: unmatched sends and receives per (lane, from, to, tag).
  struct Send {
    uint32_t node;
    P2pRequest id;
    const void* data;
    size_t bytes;
  };
  struct Recv {
    uint32_t node;
    P2pRequest id;
    void* data;
    size_t bytes;
  };
  using Key = std::tuple<uint32_t, uint32_t, uint32_t, int>;
  std::map<Key, std::deque<Send>> sends;
  std::map<Key, std::deque<Recv>> recvs;
};

// ---- the world ----------------------------------------------------------------------------

class InMemoryWorld {
 public:
  explicit InMemoryWorld(const InMemoryOptions& options)
      : options_(options), nodes_(options.nodes) {
    all_ = std::make_shared<InMemoryGroup>();
    for (uint32_t n = 0; n < options.nodes; ++n) all_->members.push_back(n);
  }
  const InMemoryOptions& options() const { return options_; }
  std::shared_ptr<InMemoryGroup> all_nodes() const { return all_; }
  std::mutex& mutex() { return mutex_; }

  struct Node {
    P2pRequest next_request = 1;
    std::unordered_set<P2pRequest> completed;
    std::atomic<uint64_t> completions{0};
    struct Notice {
      uint64_t tag;
      uint32_t rank;
      proto::Status status;
      std::string text;
    };
    std::deque<Notice> notices;
  };
  Node& node(uint32_t n) { return nodes_[n]; }
  // A broken contract between two daemons (a message larger than its receive): every later
  // call of every daemon fails with it, as MPI would abort the job.
  void fail(std::string text) {
    if (fatal_.empty()) fatal_ = std::move(text);
  }
  void check_fatal() const {
    if (!fatal_.empty()) throw TransportError(fatal_);
  }

 private:
  InMemoryOptions options_;
  std::mutex mutex_;
  std::vector<Node> nodes_;
  std::shared_ptr<InMemoryGroup> all_;
  std::string fatal_;
};

std::shared_ptr<InMemoryWorld> make_inmemory_world(const InMemoryOptions& options) {
  return std::make_shared<InMemoryWorld>(options);
}

namespace {

// ---- point to point -----------------------------------------------------------------------

void complete(InMemoryWorld& world, uint32_t node, P2pRequest id) {
  InMemoryWorld::Node& n = world.node(node);
  n.completed.insert(id);
  // relaxed: a progress hint only (Transport::activity); the data is published by the mutex.
  n.completions.fetch_add(1, std::memory_order_relaxed);
}

// Matches the oldest send with the oldest receive of `key`, copying the data. Caller holds
// the world's mutex.
void match(InMemoryWorld& world, InMemoryGroup& group, const InMemoryGroup::Key& key) {
  auto s = group.sends.find(key);
  auto r = group.recvs.find(key);
  while (s != group.sends.end() && r != group.recvs.end() && !s->second.empty() &&
         !r->second.empty()) {
    const InMemoryGroup::Send send = s->second.front();
    const InMemoryGroup::Recv recv = r->second.front();
    s->second.pop_front();
    r->second.pop_front();
    if (send.bytes > recv.bytes) {
      world.fail(fmt::format(
          "in-memory message of {} bytes from node {} to node {} (lane {}, tag "
          "{}) is larger than its receive of {} bytes",
          send.bytes, send.node, recv.node, std::get<0>(key), std::get<3>(key), recv.bytes));
      return;
    }
    if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
    complete(world, send.node, send.id);
    complete(world, recv.node, recv.id);
  }
  if (s != group.sends.end() && s->second.empty()) group.sends.erase(s);
  if (r != group.recvs.end() && r->second.empty()) group.recvs.erase(r);
}

class InMemoryPointToPoint final : public PointToPoint {
 public:
  InMemoryPointToPoint(InMemoryWorld& world, std::shared_ptr<InMemoryGroup> group, uint32_t rank)
      : world_(world), group_(std::move(group)), rank_(rank) {}
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return static_cast<uint32_t>(group_->members.size()); }
  uint32_t lanes() const override { return world_.options().lanes; }
  int max_tag() const override { return INT32_MAX; }
  P2pRequest isend(uint32_t lane, uint32_t peer, int tag, const void* data, size_t bytes) override {
    std::lock_guard lock(world_.mutex());
    check(lane, peer, tag, "isend");
    const P2pRequest id = world_.node(me()).next_request++;
    const InMemoryGroup::Key key{lane, rank_, peer, tag};
    group_->sends[key].push_back({me(), id, data, bytes});
    match(world_, *group_, key);
    return id;
  }
  P2pRequest irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) override {
    std::lock_guard lock(world_.mutex());
    check(lane, peer, tag, "irecv");
    const P2pRequest id = world_.node(me()).next_request++;
    const InMemoryGroup::Key key{lane, peer, rank_, tag};
    group_->recvs[key].push_back({me(), id, data, bytes});
    match(world_, *group_, key);
    return id;
  }
  // Messages match as they are posted: nothing is left to advance.
  void poll() override {
    std::lock_guard lock(world_.mutex());
    world_.check_fatal();
  }
  bool done(P2pRequest request) override {
    std::lock_guard lock(world_.mutex());
    return world_.node(me()).completed.erase(request) > 0;
  }

 private:
  uint32_t me() const { return group_->members[rank_]; }
  void check(uint32_t lane, uint32_t peer, int tag, const char* what) const {
    world_.check_fatal();
    if (lane >= lanes() || peer >= size() || tag < 0) {
      throw TransportError(fmt::format("{} on node {}: lane {} of {}, peer {} of {}, tag {}", what,
                                       me(), lane, lanes(), peer, size(), tag));
    }
  }

  InMemoryWorld& world_;
  std::shared_ptr<InMemoryGroup> group_;
  uint32_t rank_;
};

// ---- native collectives: the computation ---------------------------------------------------

template <typename T>
void combine(T* acc, const T* in, size_t n, proto::RedOp op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case proto::RedOp::kSum:
        acc[i] = static_cast<T>(acc[i] + in[i]);
        break;
      case proto::RedOp::kProd:
        acc[i] = static_cast<T>(acc[i] * in[i]);
        break;
      case proto::RedOp::kMin:
        acc[i] = std::min(acc[i], in[i]);
        break;
      default:
        acc[i] = std::max(acc[i], in[i]);
        break;
    }
  }
}

void combine(void* acc, const void* in, size_t n, proto::DType dtype, proto::RedOp op) {
  switch (dtype) {
    case proto::DType::kF32:
      return combine(static_cast<float*>(acc), static_cast<const float*>(in), n, op);
    case proto::DType::kF64:
      return combine(static_cast<double*>(acc), static_cast<const double*>(in), n, op);
    case proto::DType::kI32:
      return combine(static_cast<int32_t*>(acc), static_cast<const int32_t*>(in), n, op);
    case proto::DType::kI64:
      return combine(static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), n, op);
    case proto::DType::kI8:
      return combine(static_cast<int8_t*>(acc), static_cast<const int8_t*>(in), n, op);
    case proto::DType::kU8:
      return combine(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(in), n, op);
    default:
      // As on MPI: f16/bf16 and avg never reach the wire (the engine widens and divides).
      throw TransportError(
          fmt::format("dtype {} has no in-memory reduction", proto::dtype_name(dtype)));
  }
}

// The reduction of every member's first `count` elements, in rank order.
std::vector<uint8_t> reduce_all(const std::vector<Post>& posts, size_t count, proto::DType dtype,
                                proto::RedOp op) {
  if (op == proto::RedOp::kAvg) throw TransportError("avg has no in-memory reduction");
  const size_t bytes = count * proto::dtype_size(dtype);
  std::vector<uint8_t> acc(posts[0].buffer, posts[0].buffer + bytes);
  for (size_t r = 1; r < posts.size(); ++r) combine(acc.data(), posts[r].buffer, count, dtype, op);
  return acc;
}

// Every member agrees on the operation, or the error says where they part.
std::string disagreement(const std::vector<Post>& posts) {
  const Post& a = posts[0];
  for (size_t r = 1; r < posts.size(); ++r) {
    const Post& b = posts[r];
    if (b.kind != a.kind) {
      return fmt::format("rank 0 of the node group started {}, rank {} started {}",
                         kind_name(a.kind), r, kind_name(b.kind));
    }
    if (b.count != a.count || b.dtype != a.dtype || b.op != a.op || b.root != a.root ||
        b.sizes != a.sizes || b.displs != a.displs || b.include.size() != a.include.size()) {
      return fmt::format(
          "{}: rank 0 has count {} root {} and {} sizes, rank {} count {} root {} and {} sizes",
          kind_name(a.kind), a.count, a.root, a.sizes.size(), r, b.count, b.root, b.sizes.size());
    }
  }
  return {};
}

// Runs once every member posted; the members' buffers are theirs until they see `complete`.
void compute(NativeSlot& slot, const InMemoryGroup& group) {
  const std::vector<Post>& p = slot.posts;
  const Post& a = p[0];
  const size_t n = p.size();
  switch (a.kind) {
    case NativeKind::kAllreduce: {
      const std::vector<uint8_t> result = reduce_all(p, a.count, a.dtype, a.op);
      for (const Post& m : p) std::memcpy(m.buffer, result.data(), result.size());
      break;
    }
    case NativeKind::kReduce: {
      const std::vector<uint8_t> result = reduce_all(p, a.count, a.dtype, a.op);
      std::memcpy(p[a.root].buffer, result.data(), result.size());
      break;
    }
    case NativeKind::kReduceScatter: {
      size_t total = 0;
      for (size_t c : a.sizes) total += c;
      const std::vector<uint8_t> result = reduce_all(p, total, a.dtype, a.op);
      const size_t elem = proto::dtype_size(a.dtype);
      size_t offset = 0;
      for (size_t r = 0; r < n; ++r) {
        std::memcpy(p[r].buffer, result.data() + offset * elem, a.sizes[r] * elem);
        offset += a.sizes[r];
      }
      break;
    }
    case NativeKind::kBroadcast:
      for (size_t r = 0; r < n; ++r) {
        if (r != a.root) std::memcpy(p[r].buffer, p[a.root].buffer, a.count);
      }
      break;
    case NativeKind::kAllgatherv:
      for (size_t from = 0; from < n; ++from) {
        for (size_t to = 0; to < n; ++to) {
          if (to == from) continue;
          std::memcpy(p[to].buffer + a.displs[from], p[from].buffer + a.displs[from],
                      a.sizes[from]);
        }
      }
      break;
    case NativeKind::kGatherv:
      for (size_t from = 0; from < n; ++from) {
        if (from == a.root) continue;
        std::memcpy(p[a.root].buffer + a.displs[from], p[from].buffer + a.displs[from],
                    a.sizes[from]);
      }
      break;
    case NativeKind::kScatterv:
      for (size_t to = 0; to < n; ++to) {
        if (to == a.root) continue;
        std::memcpy(p[to].buffer + a.displs[to], p[a.root].buffer + a.displs[to], a.sizes[to]);
      }
      break;
    case NativeKind::kSplit:
      for (size_t e = 0; e < a.include.size(); ++e) {
        auto made = std::make_shared<InMemoryGroup>();
        for (size_t r = 0; r < n; ++r) {
          if (p[r].include[e]) made->members.push_back(group.members[r]);
        }
        slot.made.push_back(made->members.empty() ? nullptr : std::move(made));
      }
      break;
    case NativeKind::kBarrier:
      break;
  }
}

// ---- the transport of one daemon ----------------------------------------------------------

class InMemoryTransport final : public Transport {
 public:
  InMemoryTransport(std::shared_ptr<InMemoryWorld> world, uint32_t node)
      : world_(std::move(world)), node_(node) {
    if (node >= world_->options().nodes) {
      throw TransportError(
          fmt::format("in-memory node {} of a world of {}", node, world_->options().nodes));
    }
    add_group(kAllNodes, world_->all_nodes());
  }

  std::string name() const override { return "inmemory"; }
  uint32_t lanes() const override { return world_->options().lanes; }
  uint64_t activity() const override {
    // relaxed: a progress hint only.
    return world_->node(node_).completions.load(std::memory_order_relaxed);
  }

  // -- node groups --
  uint32_t comm_rank(NodeComm comm) const override { return view(comm).rank; }
  uint32_t comm_size(NodeComm comm) const override {
    return static_cast<uint32_t>(view(comm).group->members.size());
  }
  TransportHandle start_split_groups(NodeComm parent, std::vector<bool> include) override {
    Post p;
    p.kind = NativeKind::kSplit;
    p.include = std::move(include);
    return post_native(parent, std::move(p));
  }
  std::vector<NodeComm> take_groups(TransportHandle handle) override {
    auto it = finished_splits_.find(handle);
    if (it == finished_splits_.end()) {
      throw TransportError(
          fmt::format("node {}: communicator creation {} not finished", node_, handle));
    }
    std::vector<NodeComm> ids;
    for (const std::shared_ptr<InMemoryGroup>& made : it->second) {
      const auto mine = made ? std::find(made->members.begin(), made->members.end(), node_)
                             : std::vector<uint32_t>::iterator{};
      if (!made || mine == made->members.end()) {
        ids.push_back(kAllNodes);
        continue;
      }
      ids.push_back(next_comm_);
      add_group(next_comm_++, made);
    }
    finished_splits_.erase(it);
    return ids;
  }
  void free_group(NodeComm comm) override {
    if (comm != kAllNodes) groups_.erase(comm);
  }

  // -- native collectives --
  TransportHandle start_reduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                               proto::RedOp op, uint32_t root_node) override {
    Post p;
    p.kind = NativeKind::kReduce;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.count = count;
    p.dtype = dtype;
    p.op = op;
    p.root = root_node;
    return post_native(comm, std::move(p));
  }
  TransportHandle start_reduce_scatter(NodeComm comm, void* buffer, std::vector<size_t> node_counts,
                                       proto::DType dtype, proto::RedOp op) override {
    Post p;
    p.kind = NativeKind::kReduceScatter;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.sizes = std::move(node_counts);
    p.dtype = dtype;
    p.op = op;
    return post_native(comm, std::move(p));
  }
  TransportHandle start_broadcast(NodeComm comm, void* buffer, size_t bytes,
                                  uint32_t root_node) override {
    Post p;
    p.kind = NativeKind::kBroadcast;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.count = bytes;
    p.root = root_node;
    return post_native(comm, std::move(p));
  }
  TransportHandle start_allgatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                   std::vector<size_t> displs) override {
    Post p;
    p.kind = NativeKind::kAllgatherv;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.sizes = std::move(bytes);
    p.displs = std::move(displs);
    return post_native(comm, std::move(p));
  }
  TransportHandle start_gatherv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                std::vector<size_t> displs, uint32_t root_node) override {
    Post p;
    p.kind = NativeKind::kGatherv;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.sizes = std::move(bytes);
    p.displs = std::move(displs);
    p.root = root_node;
    return post_native(comm, std::move(p));
  }
  TransportHandle start_scatterv(NodeComm comm, void* buffer, std::vector<size_t> bytes,
                                 std::vector<size_t> displs, uint32_t root_node) override {
    Post p;
    p.kind = NativeKind::kScatterv;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.sizes = std::move(bytes);
    p.displs = std::move(displs);
    p.root = root_node;
    return post_native(comm, std::move(p));
  }
  TransportHandle start_barrier(NodeComm comm) override {
    Post p;
    p.kind = NativeKind::kBarrier;
    return post_native(comm, std::move(p));
  }

  // MPI's own allreduce (the `mpi` algorithm), computed in memory.
  TransportHandle start_allreduce(NodeComm comm, void* buffer, size_t count, proto::DType dtype,
                                  proto::RedOp op) override {
    Post p;
    p.kind = NativeKind::kAllreduce;
    p.buffer = static_cast<uint8_t*>(buffer);
    p.count = count;
    p.dtype = dtype;
    p.op = op;
    return post_native(comm, std::move(p));
  }
  size_t max_count() const override { return world_->options().max_count; }

  // -- point to point: the algorithms run over each group's in-memory network --
  PointToPoint& p2p(NodeComm comm) override { return *view(comm).net; }

  bool test(TransportHandle handle) override {
    auto it = natives_.find(handle);
    if (it == natives_.end()) {
      throw TransportError(fmt::format("node {}: unknown handle {}", node_, handle));
    }
    {
      std::lock_guard lock(world_->mutex());
      world_->check_fatal();
      NativeSlot& slot = *it->second.slot;
      if (!slot.error.empty()) {
        natives_.erase(it);
        throw TransportError(fmt::format("node {}: {}", node_, slot.error));
      }
      if (!slot.complete) return false;
      if (slot.posts[0].kind == NativeKind::kSplit) finished_splits_.emplace(handle, slot.made);
    }
    natives_.erase(it);
    return true;
  }
  size_t in_flight() const override { return natives_.size(); }

  // -- notices and liveness --
  void send_notice(uint64_t tag, uint32_t rank, proto::Status status,
                   const std::string& text) override {
    std::lock_guard lock(world_->mutex());
    for (uint32_t n = 0; n < node_count(); ++n) {
      if (n == node_) continue;
      world_->node(n).notices.push_back(
          {tag, rank, status, fmt::format("node {} reports: {}", node_, text)});
    }
  }
  bool poll_notice(uint64_t& tag, uint32_t& rank, proto::Status& status,
                   std::string& text) override {
    std::lock_guard lock(world_->mutex());
    auto& queue = world_->node(node_).notices;
    if (queue.empty()) return false;
    tag = queue.front().tag;
    rank = queue.front().rank;
    status = queue.front().status;
    text = std::move(queue.front().text);
    queue.pop_front();
    return true;
  }
  // Daemons in one process are never lost to each other.
  std::vector<LostPeer> check_peers(uint64_t, uint64_t, uint64_t) override { return {}; }

 private:
  struct View {
    std::shared_ptr<InMemoryGroup> group;
    uint32_t rank = 0;
    std::unique_ptr<InMemoryPointToPoint> net;
    uint64_t natives = 0;  // native collectives started: the slot index
  };
  struct Native {
    std::shared_ptr<NativeSlot> slot;
  };

  void add_group(NodeComm id, std::shared_ptr<InMemoryGroup> group) {
    View v;
    const auto at = std::find(group->members.begin(), group->members.end(), node_);
    v.rank = static_cast<uint32_t>(at - group->members.begin());
    v.net = std::make_unique<InMemoryPointToPoint>(*world_, group, v.rank);
    v.group = std::move(group);
    groups_[id] = std::move(v);
  }
  View& view(NodeComm comm) {
    auto it = groups_.find(comm);
    if (it == groups_.end()) {
      throw TransportError(fmt::format("node {}: unknown node communicator {}", node_, comm));
    }
    return it->second;
  }
  const View& view(NodeComm comm) const { return const_cast<InMemoryTransport*>(this)->view(comm); }

  // Posts this member's part of the group's next native collective; the last member to post
  // computes it for everyone.
  TransportHandle post_native(NodeComm comm, Post post) {
    View& v = view(comm);
    const uint64_t index = v.natives++;
    std::shared_ptr<NativeSlot> slot;
    {
      std::lock_guard lock(world_->mutex());
      world_->check_fatal();
      InMemoryGroup& g = *v.group;
      const size_t size = g.members.size();
      auto& entry = g.slots[index];
      if (!entry) {
        entry = std::make_shared<NativeSlot>();
        entry->posts.resize(size);
        entry->posted.assign(size, false);
      }
      slot = entry;
      slot->posts[v.rank] = std::move(post);
      slot->posted[v.rank] = true;
      if (++slot->count == size) {
        g.slots.erase(index);
        slot->error = disagreement(slot->posts);
        if (slot->error.empty()) {
          try {
            compute(*slot, g);
          } catch (const TransportError& e) {
            slot->error = e.what();
          }
        } else {
          slot->error = fmt::format("native collective {} of a node group of {} disagrees: {}",
                                    index, size, slot->error);
        }
        slot->complete = true;
      }
    }
    const TransportHandle handle = next_++;
    natives_.emplace(handle, Native{std::move(slot)});
    return handle;
  }

  std::shared_ptr<InMemoryWorld> world_;
  uint32_t node_;
  NodeComm next_comm_ = 1;
  TransportHandle next_ = 1;
  std::unordered_map<NodeComm, View> groups_;
  std::unordered_map<TransportHandle, Native> natives_;
  std::unordered_map<TransportHandle, std::vector<std::shared_ptr<InMemoryGroup>>> finished_splits_;
};

}  // namespace

std::unique_ptr<Transport> make_inmemory_transport(std::shared_ptr<InMemoryWorld> world,
                                                   uint32_t node) {
  return std::make_unique<InMemoryTransport>(std::move(world), node);
}

}  // namespace nodecomm::daemon
