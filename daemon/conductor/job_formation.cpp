// Job formation across nodes (Daemon::progress_formation): once a job's local ranks have all
// attached, the daemons exchange one record each over the world, check that they agree on the
// job, and build the world communicator's layout; then every rank gets its job-ready reply.
#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "conductor/daemon.hpp"
#include "conductor/peer_groups.hpp"
#include "config/log.hpp"
#include "nodecomm/ipc/clock.hpp"
#include "nodecomm/ipc/fixed_text.hpp"
#include "nodecomm/proto/control.hpp"

namespace nodecomm::daemon {

void Daemon::start_formation(ServedJob& served) {
  Job& job = served.job();
  job.state = Job::State::kForming;
  if (const ClientSession* first = job.members[0]; first != nullptr) {
    served.weight = job_weight(job_weights_, first->cred().uid,
                               peer_groups(first->fd(), first->cred()), job.requested.weight);
  }
  if (one_job_at_a_time() || job.asked_nodes <= 1) return start_exchange(served);
  // A service daemon: the job's daemons find each other by a name that only the same job of
  // the same user gives (local rank 0's uid; a job of several uids has one uid at rank 0 on
  // every node).
  const ClientSession* first = job.members[0];
  const std::string key = fmt::format("{}:{}", first != nullptr ? first->cred().uid : 0, job.name);
  try {
    served.group_formation = job_groups_->start(key, job.asked_node, job.asked_nodes);
    served.attach_since_ns = ipc::monotonic_ns();  // the attach deadline bounds the formation
    NC_LOG(kInfo, "job {}: forming its group of {} nodes (this is node {})", job.name,
           job.asked_nodes, job.asked_node);
  } catch (const TransportError& e) {
    job.state = Job::State::kFailed;
    send_job_ready(job, proto::Status::kPeerLost,
                   fmt::format("job '{}' could not form: {}", job.name, e.what()));
  }
}

size_t Daemon::progress_group(ServedJob& served) {
  Job& job = served.job();
  std::unique_ptr<Transport> group;
  try {
    group = job_groups_->poll(served.group_formation);
  } catch (const TransportError& e) {
    served.group_formation = 0;
    job.state = Job::State::kFailed;
    send_job_ready(job, proto::Status::kPeerLost,
                   fmt::format("job '{}' could not form: {}", job.name, e.what()));
    return 1;
  }
  if (!group) return 0;
  served.group_formation = 0;
  served.attach_since_ns = 0;
  if (group->node_count() != job.asked_nodes || group->node_index() != job.asked_node) {
    job.state = Job::State::kFailed;
    send_job_ready(
        job, proto::Status::kInternal,
        fmt::format("job '{}': its group came back as node {} of {}, not node {} of {}", job.name,
                    group->node_index(), group->node_count(), job.asked_node, job.asked_nodes));
    return 1;
  }
  NC_LOG(kInfo, "job {}: group of {} nodes formed", job.name, job.asked_nodes);
  served.adopt_group(std::move(group), config_);
  start_exchange(served);
  return 1;
}

void Daemon::start_exchange(ServedJob& served) {
  // Exchange local counts with the other daemons of the group to place the node's ranks in the
  // world (world rank = node offset + local rank).
  Job& job = served.job();
  Transport& group = served.transport();
  job.node_index = group.node_index();
  job.node_count = group.node_count();
  job.mine = Job::NodeRecord{XXH3_64bits(job.name.data(), job.name.size()), job.local_size,
                             job.node_index};
  job.gathered.assign(job.node_count, Job::NodeRecord{});
  job.gathered[job.node_index] = job.mine;
  try {
    // Every node's record to every node, in place (MPI_Iallgatherv over the group).
    const std::vector<size_t> bytes(job.node_count, sizeof(Job::NodeRecord));
    std::vector<size_t> displs(job.node_count);
    for (uint32_t n = 0; n < job.node_count; ++n) displs[n] = n * sizeof(Job::NodeRecord);
    job.formation = group.start_allgatherv(kAllNodes, job.gathered.data(), bytes, displs);
  } catch (const TransportError& e) {
    job.state = Job::State::kFailed;
    send_job_ready(job, proto::Status::kPeerLost, e.what());
  }
}

size_t Daemon::progress_formation(ServedJob& served) {
  Job& job = served.job();
  try {
    if (!served.transport().test(job.formation)) return 0;
  } catch (const TransportError& e) {
    job.state = Job::State::kFailed;
    send_job_ready(job, proto::Status::kPeerLost,
                   fmt::format("job '{}' could not form: {}", job.name, e.what()));
    return 1;
  }
  job.formation = 0;
  uint32_t offset = 0;
  uint32_t total = 0;
  for (const Job::NodeRecord& r : job.gathered) {
    if (r.job_hash != job.mine.job_hash) {
      job.state = Job::State::kFailed;
      send_job_ready(job, proto::Status::kMismatch,
                     fmt::format("node {} is running a different job than '{}' on node {}; every "
                                 "node must use the same NODECOMM_JOB",
                                 r.node_index, job.name, job.node_index));
      return 1;
    }
    if (r.node_index < job.node_index) offset += r.local_size;
    total += r.local_size;
  }
  job.world_offset = offset;
  job.world_size = total;
  // The world communicator: world ranks are node-major already.
  CommLayout world;
  world.size = total;
  world.node_comm = kAllNodes;
  world.node_index = job.node_index;
  world.node_count = job.node_count;
  std::vector<std::vector<uint32_t>> ranks_by_node;
  uint32_t next_rank = 0;
  for (const Job::NodeRecord& r : job.gathered) {
    ranks_by_node.emplace_back();
    for (uint32_t k = 0; k < r.local_size; ++k) ranks_by_node.back().push_back(next_rank++);
  }
  world.set_ranks_by_node(ranks_by_node);
  for (uint32_t r = 0; r < total; ++r) world.world_rank_of.push_back(r);
  for (uint32_t k = 0; k < job.local_size; ++k) {
    world.members.push_back(k);
    world.member_ranks.push_back(offset + k);
  }
  auto& comm =
      job.comms.emplace(0, std::make_unique<Communicator>(0, std::move(world))).first->second;
  for (ClientSession* member : job.members) {
    if (member->state() == ClientSession::State::kClosed) {
      comm->poison(proto::Status::kPeerLost,
                   fmt::format("rank {} (pid {}) left while the job was forming",
                               member->world_rank, member->cred().pid));
    }
  }
  for (ClientSession* member : job.members)
    member->world_rank = job.world_rank_of(member->local_rank);
  job.state = Job::State::kRunning;
  NC_LOG(kInfo, "job {} formed: {} ranks on {} nodes; this node hosts ranks {}..{}", job.name,
         job.world_size, job.node_count, offset, offset + job.local_size - 1);
  send_job_ready(job, proto::Status::kOk, {});
  return 1;
}

void Daemon::send_job_ready(Job& job, proto::Status status, const std::string& text) {
  for (ClientSession* member : job.members) {
    if (member == nullptr || member->state() == ClientSession::State::kClosed) continue;
    proto::JobReady ready{};
    ready.type = static_cast<uint32_t>(proto::ControlType::kJobReady);
    ready.status = static_cast<int32_t>(status);
    ready.world_rank = member->world_rank;
    ready.world_size = job.world_size;
    ready.node_index = job.node_index;
    ready.node_count = job.node_count;
    ready.local_rank = member->local_rank;
    ready.local_size = job.local_size;
    ipc::copy_text(ready.message, text);
    if (ipc::send_message(member->fd(), &ready, sizeof(ready)) != ipc::IoResult::kOk) {
      drop(*member, "could not be told its world placement");
    }
  }
  if (status != proto::Status::kOk) NC_LOG(kError, "job {}: {}", job.name, text);
}

}  // namespace nodecomm::daemon
