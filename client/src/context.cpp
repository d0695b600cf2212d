#include "context.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "nodecomm/ipc/byte_size.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/daemon_identity.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/ipc/futex.hpp"
#include "nodecomm/ipc/idle.hpp"
#include "nodecomm/ipc/runtime_paths.hpp"
#include "nodecomm/ipc/validate.hpp"
#include "nodecomm/proto/control.hpp"

namespace nodecomm::client {

namespace {

constexpr uint64_t kLivenessSliceNs = 50'000'000;  // futex sleeps this long between checks
constexpr uint64_t kLivenessCheckNs = 5'000'000;

}  // namespace

Result Context::create(const Settings& settings, Context*& out) {
  auto* ctx = new Context();
  Result r = ctx->attach(settings);
  if (r.status != NC_OK) {
    delete ctx;
    return r;
  }
  out = ctx;
  return r;
}

Result Context::attach(const Settings& s) {
  settings_ = s;
  const std::string path = ipc::socket_path(s.runtime_dir);
  const uint64_t start = ipc::monotonic_ns();
  const auto elapsed_sec = [&] { return static_cast<double>(ipc::monotonic_ns() - start) / 1e9; };
  std::string error;
  for (;;) {
    int error_number = 0;
    socket_ = ipc::connect_unix(path, error, &error_number);
    if (socket_.valid()) break;
    // Waiting cannot help a uid the socket or its directory shuts out: say so at once.
    if (error_number == EACCES || error_number == EPERM) {
      return fail(NC_ERR_PERMISSION,
                  fmt::format("permission denied on nodecommd's socket {} for uid {} ({}); the "
                              "administrator sets who may connect with the runtime directory's "
                              "and the socket's mode and group (docs/OPERATIONS.md)",
                              path, ::getuid(), error));
    }
    if (elapsed_sec() >= s.connect_timeout_sec) {
      return fail(NC_ERR_DAEMON_LOST,
                  fmt::format("no nodecommd at {} after {:.0f} s ({}); is the daemon running, and "
                              "is NODECOMM_RUNTIME_DIR or NODECOMM_INSTANCE right?",
                              path, s.connect_timeout_sec, error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // Nothing goes to a listener that is not the daemon's uid (ipc/daemon_identity.hpp).
  if (std::string refusal = ipc::check_daemon_peer(socket_.get(), path); !refusal.empty()) {
    socket_.reset();
    return fail(NC_ERR_PERMISSION, refusal);
  }

  proto::Hello hello{};
  hello.type = static_cast<uint32_t>(proto::ControlType::kHello);
  hello.magic = proto::kControlMagic;
  hello.layout_version = proto::kLayoutVersion;
  hello.local_rank = s.local_rank;
  hello.local_size = s.local_size;
  hello.node_index = s.node_index;
  hello.node_count = s.node_count;
  hello.arena_bytes = s.arena_bytes;
  ipc::copy_text(hello.job, s.job);
  hello.tuning = s.tuning;
  // A daemon at its client limit refuses at accept and closes: the hello then fails to send,
  // but the refusal is already waiting on the socket.
  const bool sent = ipc::send_message(socket_.get(), &hello, sizeof(hello)) == ipc::IoResult::kOk;
  const int timeout_ms = sent ? static_cast<int>(std::min(s.timeout_sec * 1000.0, 2.0e9)) : 100;
  proto::HelloReply reply{};
  size_t size = 0;
  ipc::Fd segment_fd;  // the segment itself comes attached to the reply (SCM_RIGHTS)
  ipc::IoResult io =
      ipc::recv_message_timed(socket_.get(), &reply, sizeof(reply), size, timeout_ms, &segment_fd);
  if (!sent && (io != ipc::IoResult::kOk || reply.status == 0)) return daemon_lost("sending hello");
  if (io == ipc::IoResult::kTimeout) {
    return fail(NC_ERR_TIMEOUT, fmt::format("nodecommd at {} did not answer hello within {:.0f} s",
                                            path, s.timeout_sec));
  }
  if (io != ipc::IoResult::kOk || size != sizeof(reply) ||
      reply.type != static_cast<uint32_t>(proto::ControlType::kHelloReply)) {
    return daemon_lost("waiting for the hello reply");
  }
  if (reply.status != 0) {
    return fail(static_cast<nc_status_t>(reply.status),
                fmt::format("nodecommd refused local rank {} of job '{}': {}", s.local_rank, s.job,
                            ipc::bounded_text(reply.message)));
  }
  try {
    segment_ = ipc::Segment::open(segment_fd.get(), reply.segment_bytes);
  } catch (const std::exception& e) {
    return fail(NC_ERR_PROTOCOL, e.what());
  }
  segment_fd.reset();  // mapped: the descriptor is not needed any more
  const proto::Mapped mapped{static_cast<uint32_t>(proto::ControlType::kMapped), 0};
  if (ipc::send_message(socket_.get(), &mapped, sizeof(mapped)) != ipc::IoResult::kOk) {
    return daemon_lost("acknowledging the segment");
  }
  submissions_ = ipc::RingProducer<proto::OpDescriptor>(
      &segment_.submit_ring(), segment_.submit_slots(), segment_.submit_capacity());
  completions_ = ipc::RingConsumer<proto::Completion>(
      &segment_.complete_ring(), segment_.complete_slots(), segment_.complete_capacity());
  arena_ = ArenaAllocator(segment_.arena_bytes());

  proto::JobReady ready{};
  io = ipc::recv_message_timed(socket_.get(), &ready, sizeof(ready), size, timeout_ms);
  if (io == ipc::IoResult::kTimeout) {
    return fail(
        NC_ERR_TIMEOUT,
        fmt::format("job '{}' did not form within {:.0f} s: local rank {} of {} is attached, "
                    "but not every rank on every node has started",
                    s.job, s.timeout_sec, s.local_rank, s.local_size));
  }
  if (io != ipc::IoResult::kOk || size != sizeof(ready) ||
      ready.type != static_cast<uint32_t>(proto::ControlType::kJobReady)) {
    return daemon_lost("waiting for the job to form");
  }
  if (ready.status != 0) {
    return fail(static_cast<nc_status_t>(ready.status), ipc::bounded_text(ready.message));
  }
  // This node's ranks and its daemon poll; with more of them than CPUs, waits must yield early.
  try {
    const char* mode = std::getenv("NODECOMM_IDLE");
    if (mode == nullptr || *mode == '\0') mode = "auto";
    idle_config_ = ipc::IdleConfig::for_mode(mode, s.local_size + 1);
  } catch (const std::invalid_argument& e) {
    return fail(NC_ERR_INVALID_ARGUMENT, fmt::format("NODECOMM_IDLE: {}", e.what()));
  }
  comms_[0] = CommInfo{ready.world_rank, ready.world_size};
  world_rank_ = ready.world_rank;
  world_size_ = ready.world_size;
  node_index_ = ready.node_index;
  node_count_ = ready.node_count;
  start_heartbeat();
  return Result::ok();
}

void Context::start_heartbeat() {
  constexpr auto kHeartbeatPeriod = std::chrono::milliseconds(200);
  heartbeat_ = std::jthread([this, kHeartbeatPeriod](const std::stop_token& stop) {
    std::unique_lock lock(heartbeat_mutex_);
    while (!stop.stop_requested()) {
      // relaxed: a timestamp the daemon compares with its own clock; it publishes nothing.
      ipc::store_u64(segment_.doorbells().client_heartbeat_ns, ipc::monotonic_ns(),
                     std::memory_order_relaxed);
      heartbeat_cv_.wait_for(lock, stop, kHeartbeatPeriod, [] { return false; });
    }
  });
}

Context::~Context() = default;

Result Context::finalize() {
  std::lock_guard lock(mutex_);
  if (socket_.valid()) {
    const proto::Bye bye{static_cast<uint32_t>(proto::ControlType::kBye), 0};
    ipc::send_message(socket_.get(), &bye, sizeof(bye));
  }
  return Result::ok();
}

Result Context::daemon_lost(const std::string& during) const {
  return fail(NC_ERR_DAEMON_LOST,
              fmt::format("nodecommd at {} closed the connection while {} (local rank {} of job "
                          "'{}'); the daemon exited or was killed",
                          ipc::socket_path(settings_.runtime_dir), during, settings_.local_rank,
                          settings_.job));
}

bool Context::in_arena(const void* p, uint64_t bytes, uint64_t& offset) const {
  const auto* base = segment_.arena();
  const auto* q = static_cast<const uint8_t*>(p);
  if (q < base || q > base + arena_.total()) return false;
  offset = static_cast<uint64_t>(q - base);
  return bytes <= arena_.total() - offset;
}

bool Context::shared_offset(const void* p, uint64_t bytes, uint64_t& offset) const {
  if (in_arena(p, bytes, offset)) return true;
  const auto* q = static_cast<const uint8_t*>(p);
  for (size_t r = 0; r < region_addrs_.size(); ++r) {
    const uint8_t* addr = region_addrs_[r];
    const uint64_t size = region_sizes_[r];
    if (q < addr || q > addr + size) continue;
    const auto within = static_cast<uint64_t>(q - addr);
    if (bytes > size - within) continue;
    offset = proto::region_offset(static_cast<uint32_t>(r), within);
    return true;
  }
  return false;
}

Result Context::register_fd(int fd, uint64_t file_offset, uint64_t bytes, void* addr) {
  std::lock_guard lock(mutex_);
  const std::string what =
      fmt::format("nc_register_fd(fd {}, offset {}, {} bytes)", fd, file_offset, bytes);
  if (fd < 0 || addr == nullptr || bytes == 0) {
    return fail(NC_ERR_INVALID_ARGUMENT, what + ": needs an open fd, an address and bytes > 0");
  }
  if (region_addrs_.size() >= proto::kMaxRegions) {
    return fail(NC_ERR_NO_MEMORY, fmt::format("{}: {} regions are registered, the most one "
                                              "context may have",
                                              what, region_addrs_.size()));
  }
  proto::Register request{};
  request.type = static_cast<uint32_t>(proto::ControlType::kRegister);
  request.file_offset = file_offset;
  request.bytes = bytes;
  if (ipc::send_message(socket_.get(), &request, sizeof(request), fd) != ipc::IoResult::kOk) {
    return daemon_lost("registering memory");
  }
  proto::RegisterReply reply{};
  size_t size = 0;
  const int timeout_ms = 30000;
  const ipc::IoResult io =
      ipc::recv_message_timed(socket_.get(), &reply, sizeof(reply), size, timeout_ms);
  if (io == ipc::IoResult::kTimeout) {
    return fail(NC_ERR_TIMEOUT, what + ": no answer from nodecommd in 30 s");
  }
  if (io != ipc::IoResult::kOk || size != sizeof(reply) ||
      reply.type != static_cast<uint32_t>(proto::ControlType::kRegisterReply)) {
    return daemon_lost("registering memory");
  }
  if (reply.status != static_cast<int32_t>(proto::Status::kOk)) {
    return fail(static_cast<nc_status_t>(reply.status),
                fmt::format("{}: {}", what, ipc::bounded_text(reply.message)));
  }
  if (reply.region != region_addrs_.size()) {
    return fail(NC_ERR_PROTOCOL, fmt::format("{}: nodecommd numbered the region {}, expected {}",
                                             what, reply.region, region_addrs_.size()));
  }
  region_addrs_.push_back(static_cast<const uint8_t*>(addr));
  region_sizes_.push_back(bytes);
  return Result::ok();
}

Result Context::alloc(size_t bytes, void** ptr) {
  std::lock_guard lock(mutex_);
  const uint64_t alignment = bytes >= (64u << 10) ? 4096 : 64;
  const auto offset = arena_.allocate(bytes, alignment);
  if (!offset) {
    return fail(NC_ERR_NO_MEMORY,
                fmt::format("nc_alloc({} bytes): the {}-byte arena has {} bytes free, not in one "
                            "block that large; request a bigger arena (NODECOMM_ARENA_BYTES)",
                            bytes, arena_.total(), arena_.free_bytes()));
  }
  *ptr = segment_.arena() + *offset;
  return Result::ok();
}

Result Context::free(void* ptr) {
  std::lock_guard lock(mutex_);
  uint64_t offset = 0;
  if (!in_arena(ptr, 0, offset) || !arena_.release(offset)) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("nc_free({}): not a live buffer from nc_alloc", ptr));
  }
  return Result::ok();
}

void Context::arena_info(uint64_t* total, uint64_t* free_bytes) const {
  std::lock_guard lock(mutex_);
  if (total != nullptr) *total = arena_.total();
  if (free_bytes != nullptr) *free_bytes = arena_.free_bytes();
}

std::string Context::describe(const Request& r) const {
  std::string text = fmt::format("{} seq {} on comm {} (rank {})",
                                 proto::collective_name(r.collective), r.seq, r.comm, world_rank_);
  if (!r.name.empty()) text += fmt::format(" '{}'", r.name);
  return text;
}

Result Context::post(const CollectiveArgs& a, nc_request_t* req) {
  if (req == nullptr) return fail(NC_ERR_INVALID_ARGUMENT, "request pointer is NULL");
  const size_t elem = proto::dtype_size(a.dtype);
  if (elem == 0) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("unknown dtype {}", static_cast<int>(a.dtype)));
  }
  std::lock_guard lock(mutex_);
  if (daemon_gone_) return daemon_lost("posting a collective");
  if (in_flight_ >= submissions_.capacity()) {
    return fail(NC_ERR_QUEUE_FULL,
                fmt::format("{} operations are in flight, the limit for one client; wait for some "
                            "before posting more",
                            in_flight_));
  }
  const auto comm_it = comms_.find(a.comm);
  if (comm_it == comms_.end()) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("{} on comm {} (rank {}): no such communicator here (never created, "
                            "freed, or this rank opted out of the split)",
                            proto::collective_name(a.collective), a.comm, world_rank_));
  }
  const uint32_t size = comm_it->second.size;
  const uint32_t rank = comm_it->second.rank;
  proto::BufferElems elems = proto::buffer_elems(a.collective, a.count, size, a.root == rank);
  const uint64_t aux_entries = proto::aux_entries(a.collective, size);
  if (aux_entries > 0) {
    if (ipc::Verdict v =
            ipc::vector_extents(a.collective, a.aux, size, rank, a.count, uint64_t{1} << 40, elems);
        !v.ok()) {
      return fail(static_cast<nc_status_t>(v.status),
                  fmt::format("{} on comm {} (rank {}): {}", proto::collective_name(a.collective),
                              a.comm, rank, v.message));
    }
  }
  const uint64_t send_bytes = elems.send * elem;
  const uint64_t recv_bytes = elems.recv * elem;
  Request r;
  r.comm = a.comm;
  r.collective = a.collective;
  if (a.attr != nullptr && a.attr->name != nullptr) r.name = a.attr->name;
  if ((send_bytes > 0 && a.send == nullptr) || (recv_bytes > 0 && a.recv == nullptr)) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("{}: the {} buffer is NULL but this rank needs {} bytes there",
                            describe(r), a.send == nullptr ? "send" : "receive",
                            a.send == nullptr ? send_bytes : recv_bytes));
  }
  const auto* send = static_cast<const uint8_t*>(a.send);
  const auto* recv = static_cast<const uint8_t*>(a.recv);
  const proto::InPlace layout = proto::in_place_layout(a.collective, a.count, rank, a.root);
  const uint64_t shift = layout.index * elem;
  const bool in_place = send_bytes > 0 && recv_bytes > 0 &&
                        ((layout.kind == proto::InPlace::kSendInRecv && send == recv + shift) ||
                         (layout.kind == proto::InPlace::kRecvInSend && recv == send + shift));

  proto::OpDescriptor d{};
  d.collective = static_cast<uint16_t>(a.collective);
  d.dtype = static_cast<uint8_t>(a.dtype);
  d.redop = static_cast<uint8_t>(a.op);
  d.count = a.count;
  d.comm_id = a.comm;
  d.root = a.root;
  d.priority = a.attr != nullptr ? a.attr->priority : 0;
  d.compression = a.attr != nullptr ? static_cast<uint8_t>(a.attr->compress) : 0;
  d.flags = in_place ? proto::kOpFlagInPlace : 0;
  ipc::copy_text(d.name, r.name);
  const bool send_in_arena = send_bytes == 0 || shared_offset(a.send, send_bytes, d.send_offset);
  const bool recv_in_arena = recv_bytes == 0 || shared_offset(a.recv, recv_bytes, d.recv_offset);
  if (send_bytes == 0) d.send_offset = 0;
  if (recv_bytes == 0) d.recv_offset = 0;
  if ((!send_in_arena || !recv_in_arena) && in_place) {
    // Copy path in place: one block holds the caller's outer buffer, copied in whole and the
    // result copied out, and the daemon still works in place (half the arena of two blocks).
    const bool outer_is_recv = layout.kind == proto::InPlace::kSendInRecv;
    const uint64_t outer_bytes = outer_is_recv ? recv_bytes : send_bytes;
    const auto block = arena_.allocate(outer_bytes, 64);
    if (!block) {
      return fail(NC_ERR_NO_MEMORY,
                  fmt::format("{} in place on memory outside the arena needs {} bytes of arena and "
                              "the arena has {} free; use nc_alloc buffers or a bigger arena",
                              describe(r), outer_bytes, arena_.free_bytes()));
    }
    std::memcpy(segment_.arena() + *block, outer_is_recv ? a.recv : a.send, outer_bytes);
    r.temp_send = *block;
    d.send_offset = outer_is_recv ? *block + shift : *block;
    d.recv_offset = outer_is_recv ? *block : *block + shift;
    r.recv_copy_from = d.recv_offset;
    r.user_recv = a.recv;
    r.recv_bytes = recv_bytes;
  } else if (!send_in_arena || !recv_in_arena) {
    // Copy path: the daemon works on temporary arena blocks; the input is copied in now and
    // the result out on completion. Aliasing in the caller's memory no longer matters.
    const auto temp_send = send_bytes > 0 ? arena_.allocate(send_bytes, 64) : uint64_t{0};
    const auto temp_recv = recv_bytes > 0 ? arena_.allocate(recv_bytes, 64) : uint64_t{0};
    if (!temp_send || !temp_recv) {
      if (temp_send && send_bytes > 0) arena_.release(*temp_send);
      if (temp_recv && recv_bytes > 0) arena_.release(*temp_recv);
      return fail(NC_ERR_NO_MEMORY,
                  fmt::format("{} on memory outside the arena needs {} + {} bytes of arena and the "
                              "arena has {} free; use nc_alloc buffers or a bigger arena",
                              describe(r), send_bytes, recv_bytes, arena_.free_bytes()));
    }
    if (send_bytes > 0) {
      std::memcpy(segment_.arena() + *temp_send, a.send, send_bytes);
      r.temp_send = *temp_send;
    }
    if (recv_bytes > 0) {
      r.temp_recv = *temp_recv;
      // Vector collectives write only their runs: keep the caller's bytes in the gaps.
      if (aux_entries > 0) std::memcpy(segment_.arena() + *temp_recv, a.recv, recv_bytes);
    }
    d.send_offset = *temp_send;
    d.recv_offset = *temp_recv;
    d.flags = 0;
    r.recv_copy_from = *temp_recv;
    r.user_recv = a.recv;
    r.recv_bytes = recv_bytes;
  }
  if (aux_entries > 0) {
    const auto aux = arena_.allocate(aux_entries * sizeof(uint64_t), 64);
    if (!aux) {
      release_temporaries(r);
      return fail(NC_ERR_NO_MEMORY,
                  fmt::format("{}: no arena room for the count arrays", describe(r)));
    }
    std::memcpy(segment_.arena() + *aux, a.aux, aux_entries * sizeof(uint64_t));
    r.temp_aux = *aux;
    d.aux_offset = *aux;
  }
  uint64_t& seq = next_seq_.try_emplace(a.comm, 1).first->second;
  d.seq = seq;
  r.seq = seq;
  ipc::ValidationLimits limits{arena_.total(), uint64_t{1} << 40, size, rank};
  limits.region_bytes = region_sizes_.data();
  limits.region_count = static_cast<uint32_t>(region_sizes_.size());
  limits.aux = a.aux;
  const ipc::Verdict verdict = ipc::validate_descriptor(d, limits);
  if (!verdict.ok()) {
    release_temporaries(r);
    return fail(static_cast<nc_status_t>(verdict.status),
                fmt::format("{}: {}", describe(r), verdict.message));
  }
  const nc_request_t id = next_request_++;
  d.correlation_id = id;
  if (submissions_.try_push(d) != ipc::RingResult::kOk) {
    release_temporaries(r);
    return fail(NC_ERR_PROTOCOL,
                fmt::format("{}: submission ring is full or corrupt with {} in flight", describe(r),
                            in_flight_));
  }
  ++seq;
  ++in_flight_;
  requests_.emplace(id, std::move(r));
  // seq_cst: orders the tail publication before reading daemon_parked (the daemon sets the
  // flag, then re-reads tails), so a submission is never left unseen by a sleeping daemon.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto& bells = segment_.doorbells();
  if (ipc::load_word(bells.daemon_parked, std::memory_order_relaxed) != 0 &&
      ipc::exchange_word(bells.daemon_parked, 0, std::memory_order_seq_cst) != 0) {
    const proto::Wake wake{static_cast<uint32_t>(proto::ControlType::kWake), 0};
    ipc::send_message(socket_.get(), &wake, sizeof(wake));
  }
  *req = id;
  return Result::ok();
}

void Context::release_temporaries(const Request& r) {
  if (r.temp_send != kNoBlock) arena_.release(r.temp_send);
  if (r.temp_recv != kNoBlock) arena_.release(r.temp_recv);
  if (r.temp_aux != kNoBlock) arena_.release(r.temp_aux);
}

Result Context::drain_completions() {
  proto::Completion c;
  for (;;) {
    // The message only for an error: a success is its first cache line (completion_bytes).
    const ipc::RingResult r = completions_.try_pop(
        c, offsetof(proto::Completion, message), [](const proto::Completion& head) {
          return head.status == 0 ? offsetof(proto::Completion, message)
                                  : sizeof(proto::Completion);
        });
    if (r == ipc::RingResult::kEmpty) return Result::ok();
    if (r == ipc::RingResult::kCorrupt) {
      return fail(NC_ERR_PROTOCOL, "completion ring position is impossible; segment corrupt");
    }
    auto it = requests_.find(c.correlation_id);
    if (it == requests_.end() || it->second.done) continue;  // stale or duplicate: ignore
    Request& req = it->second;
    req.done = true;
    req.status = static_cast<nc_status_t>(c.status);
    req.new_comm = c.new_comm_id;
    req.new_rank = c.new_comm_rank;
    req.new_size = c.new_comm_size;
    if (c.status != 0) req.message = ipc::bounded_text(c.message);
    --in_flight_;
  }
}

Result Context::retire(std::unordered_map<nc_request_t, Request>::iterator it) {
  const nc_request_t id = it->first;
  Request req = std::move(it->second);
  requests_.erase(it);
  if (id == pending_comm_op_) last_comm_op_ = req;
  if (req.status == NC_OK && req.recv_bytes > 0) {
    std::memcpy(req.user_recv, segment_.arena() + req.recv_copy_from, req.recv_bytes);
  }
  release_temporaries(req);
  if (req.status == NC_OK) return Result::ok();
  return fail(req.status,
              fmt::format("{}: {}", describe(req),
                          req.message.empty() ? nc_status_string(req.status) : req.message));
}

Result Context::test(nc_request_t id) {
  std::lock_guard lock(mutex_);
  auto it = requests_.find(id);
  if (it == requests_.end()) {
    return fail(NC_ERR_INVALID_ARGUMENT,
                fmt::format("request {} is unknown or already completed", id));
  }
  if (!it->second.done) {
    if (Result r = drain_completions(); r.status != NC_OK) return r;
  }
  if (it->second.done) return retire(it);
  // A poll() per call would dominate the spin loop's latency; the daemon's death is noticed
  // at most kLivenessCheckNs (and a timer tick) late. The coarse clock: a precise read per
  // call was a tenth of a 1 x 1 round trip where reading the clock costs 40 ns.
  const uint64_t now = ipc::coarse_monotonic_ns();
  if (now - last_liveness_check_ns_ < kLivenessCheckNs) return fail(NC_IN_PROGRESS, {});
  last_liveness_check_ns_ = now;
  if (ipc::peer_closed(socket_.get())) {
    daemon_gone_ = true;
    return daemon_lost(fmt::format("{} was in flight", describe(it->second)));
  }
  return fail(NC_IN_PROGRESS, {});
}

Result Context::run_comm_op(proto::Collective collective, uint32_t comm, int32_t color, int64_t key,
                            Request* done) {
  CollectiveArgs args{collective,
                      nullptr,
                      nullptr,
                      static_cast<uint64_t>(key),
                      proto::DType::kU8,
                      proto::RedOp::kSum,
                      comm,
                      static_cast<uint32_t>(color),
                      nullptr};
  nc_request_t id = 0;
  if (Result r = post(args, &id); r.status != NC_OK) return r;
  {
    std::lock_guard lock(mutex_);
    // Keep the answer: wait() releases the request.
    pending_comm_op_ = id;
  }
  Result r = wait(id);
  std::lock_guard lock(mutex_);
  *done = last_comm_op_;
  return r;
}

Result Context::split(uint32_t parent, int32_t color, int64_t key, uint32_t* child) {
  Request done;
  if (Result r = run_comm_op(proto::Collective::kCommSplit, parent, color, key, &done);
      r.status != NC_OK) {
    return r;
  }
  std::lock_guard lock(mutex_);
  *child = done.new_comm;
  if (done.new_comm != proto::kNoComm)
    comms_[done.new_comm] = CommInfo{done.new_rank, done.new_size};
  return Result::ok();
}

Result Context::free_comm(uint32_t comm) {
  if (comm == 0) return fail(NC_ERR_INVALID_ARGUMENT, "the world communicator cannot be freed");
  Request done;
  if (Result r = run_comm_op(proto::Collective::kCommFree, comm, 0, 0, &done); r.status != NC_OK) {
    return r;
  }
  std::lock_guard lock(mutex_);
  comms_.erase(comm);
  next_seq_.erase(comm);
  return Result::ok();
}

Result Context::comm_info(uint32_t comm, uint32_t* rank, uint32_t* size) const {
  std::lock_guard lock(mutex_);
  auto it = comms_.find(comm);
  if (it == comms_.end()) {
    return fail(NC_ERR_INVALID_ARGUMENT, fmt::format("communicator {} does not exist here", comm));
  }
  if (rank != nullptr) *rank = it->second.rank;
  if (size != nullptr) *size = it->second.size;
  return Result::ok();
}

Result Context::wait(nc_request_t id) {
  size_t index = 0;
  return wait_any(&id, 1, &index);
}

Result Context::wait_any(const nc_request_t* ids, size_t n, size_t* index) {
  // The coarse clock, here and below: a timeout of seconds needs no better, and every
  // operation's wait reads it.
  const uint64_t deadline = ipc::coarse_monotonic_ns() +
                            static_cast<uint64_t>(std::min(settings_.timeout_sec, 1e9) * 1e9);
  auto& bells = segment_.doorbells();
  ipc::IdleStrategy idle(idle_config_);
  for (;;) {
    // acquire: a completion published before the bump we read is visible to the drain below.
    const uint32_t seen = ipc::load_word(bells.completion_futex, std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i) {
      if (ids[i] == 0) continue;
      Result r = test(ids[i]);
      if (r.status != NC_IN_PROGRESS) {
        *index = i;
        return r;
      }
    }
    const ipc::IdleStrategy::Phase phase = idle.next(0);
    if (phase == ipc::IdleStrategy::Phase::kSpin) {
      ipc::cpu_relax();
      continue;
    }
    if (phase == ipc::IdleStrategy::Phase::kYield) {
      sched_yield();
      continue;
    }
    const uint64_t now = ipc::coarse_monotonic_ns();
    if (now >= deadline) {
      std::lock_guard lock(mutex_);
      auto it = requests_.find(ids[0]);
      return fail(NC_ERR_TIMEOUT,
                  fmt::format("{}{} did not complete within {:.0f} s (NODECOMM_TIMEOUT_SEC); some "
                              "rank has probably not posted it",
                              it != requests_.end() ? describe(it->second) : "request",
                              n > 1 ? fmt::format(" (and {} other requests)", n - 1) : "",
                              settings_.timeout_sec));
    }
    // seq_cst: the waiting count is visible to the daemon before we re-check and sleep; the
    // futex compares `seen`, so a bump after our read makes the wait return at once.
    std::atomic_ref<uint32_t>(bells.client_waiting).fetch_add(1, std::memory_order_seq_cst);
    ipc::futex_wait(&bells.completion_futex, seen, std::min(kLivenessSliceNs, deadline - now));
    std::atomic_ref<uint32_t>(bells.client_waiting).fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace nodecomm::client
