#include "mpi/mpi_groups.hpp"

#include <fmt/format.h>

#include <utility>

namespace nodecomm::daemon {

MpiGroups::MpiGroups(MPI_Comm base, uint32_t rank, uint32_t lanes, int max_tag,
                     bool thread_multiple, CommRelease release)
    : rank_(rank),
      lanes_(lanes),
      max_tag_(max_tag),
      thread_multiple_(thread_multiple),
      release_(std::move(release)),
      table_(std::make_unique<RequestTable>(rank)) {
  // kAllNodes gets a communicator of its own, so that every group, this one included, is
  // freed alike and none shares its matching with the owner's uses of `base`.
  std::vector<MPI_Comm> made;
  MPI_Comm all = MPI_COMM_NULL;
  try {
    check_mpi(MPI_Comm_dup(base, &all), "MPI_Comm_dup (all nodes)", rank_);
    for (uint32_t i = 0; i < lanes_; ++i) {
      MPI_Comm lane = MPI_COMM_NULL;
      check_mpi(MPI_Comm_dup(base, &lane), "MPI_Comm_dup (lanes)", rank_);
      made.push_back(lane);
    }
  } catch (...) {
    for (MPI_Comm& lane : made) MPI_Comm_free(&lane);
    if (all != MPI_COMM_NULL) MPI_Comm_free(&all);
    throw;
  }
  add(kAllNodes, all, std::move(made));
}

MpiGroups::~MpiGroups() {
  for (auto& [handle, job] : jobs_) {
    // A creation still blocked in MPI (a peer died) must not hang the shutdown.
    // acquire: pairs with the creating thread's release of done.
    if (job->done.load(std::memory_order_acquire)) {
      job->thread.join();
    } else {
      job->thread.detach();
    }
  }
  table_.reset();
  for (auto& [id, group] : groups_) release_lanes_and_comm(group);
}

void MpiGroups::add(NodeComm id, MPI_Comm comm, std::vector<MPI_Comm> lanes) {
  // Errors come back as codes so a lost peer becomes a TransportError, not an abort.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  for (MPI_Comm lane : lanes) MPI_Comm_set_errhandler(lane, MPI_ERRORS_RETURN);
  Group g;
  g.comm = comm;
  g.net = std::make_unique<MpiPointToPoint>(*table_, std::move(lanes), max_tag_, rank_);
  groups_.emplace(id, std::move(g));
}

void MpiGroups::release_lanes_and_comm(Group& group) {
  if (group.net) {
    for (MPI_Comm lane : group.net->lane_comms()) release_(lane);
  }
  release_(group.comm);
}

const MpiGroups::Group& MpiGroups::group(NodeComm id) const {
  auto it = groups_.find(id);
  if (it == groups_.end()) throw TransportError(fmt::format("unknown node communicator {}", id));
  return it->second;
}

MPI_Comm MpiGroups::comm(NodeComm id) const {
  return group(id).comm;
}

uint32_t MpiGroups::rank(NodeComm id) const {
  int rank = 0;
  MPI_Comm_rank(comm(id), &rank);
  return static_cast<uint32_t>(rank);
}

uint32_t MpiGroups::size(NodeComm id) const {
  int size = 0;
  MPI_Comm_size(comm(id), &size);
  return static_cast<uint32_t>(size);
}

MpiPointToPoint& MpiGroups::p2p(NodeComm id) {
  return *group(id).net;
}

void MpiGroups::start_split(TransportHandle handle, NodeComm parent, std::vector<bool> include) {
  if (!thread_multiple_) {
    throw TransportError(
        "creating communicators needs MPI_THREAD_MULTIPLE, which this MPI "
        "library does not provide");
  }
  // Each creation runs on its own thread: creations for different communicators never wait
  // for each other, whatever order the daemons reach them in. Creations on one parent stay
  // ordered because the engine fences them in that parent's operation stream.
  auto job = std::make_shared<Job>();
  const MPI_Comm parent_comm = comm(parent);
  const int parent_rank = static_cast<int>(rank(parent));
  const uint32_t lanes = lanes_;
  job->thread = std::thread([job, parent_comm, parent_rank, lanes, include = std::move(include)] {
    for (bool in : include) {
      MPI_Comm created = MPI_COMM_NULL;
      job->status = MPI_Comm_split(parent_comm, in ? 0 : MPI_UNDEFINED, parent_rank, &created);
      if (job->status != MPI_SUCCESS) break;
      job->made.push_back(created);
      job->lanes.emplace_back();
      if (created == MPI_COMM_NULL) continue;
      // The group's lanes are made here too: MPI_Comm_dup blocks like the split.
      for (uint32_t i = 0; i < lanes && job->status == MPI_SUCCESS; ++i) {
        MPI_Comm lane = MPI_COMM_NULL;
        job->status = MPI_Comm_dup(created, &lane);
        if (job->status == MPI_SUCCESS) job->lanes.back().push_back(lane);
      }
      if (job->status != MPI_SUCCESS) break;
    }
    // release: the results written above are visible to the engine once it sees done.
    job->done.store(true, std::memory_order_release);
  });
  jobs_.emplace(handle, std::move(job));
}

bool MpiGroups::test(TransportHandle handle, bool& done) {
  auto it = jobs_.find(handle);
  if (it == jobs_.end()) return false;
  // acquire: pairs with the creating thread's release of done.
  done = it->second->done.load(std::memory_order_acquire);
  if (!done) return true;
  it->second->thread.join();
  const int status = it->second->status;
  finished_.emplace(handle, Finished{std::move(it->second->made), std::move(it->second->lanes)});
  jobs_.erase(it);
  if (status != MPI_SUCCESS) {
    throw TransportError(fmt::format("MPI_Comm_split on node {} of {}: {}", rank_, size(kAllNodes),
                                     mpi_error_text(status)));
  }
  return true;
}

std::vector<NodeComm> MpiGroups::take(TransportHandle handle) {
  auto it = finished_.find(handle);
  if (it == finished_.end()) throw TransportError("communicator creation not finished");
  std::vector<NodeComm> ids;
  for (size_t i = 0; i < it->second.comms.size(); ++i) {
    const MPI_Comm c = it->second.comms[i];
    if (c == MPI_COMM_NULL) {
      ids.push_back(kAllNodes);
      continue;
    }
    ids.push_back(next_comm_);
    add(next_comm_++, c, std::move(it->second.lanes[i]));
  }
  finished_.erase(it);
  return ids;
}

void MpiGroups::free(NodeComm id) {
  auto it = groups_.find(id);
  if (it == groups_.end() || id == kAllNodes) return;
  release_lanes_and_comm(it->second);
  groups_.erase(it);
}

}  // namespace nodecomm::daemon
