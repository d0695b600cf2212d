// The daemon's side of the jobs it serves (served_job.hpp): one loop pass over a job, its
// failure notices to and from the other daemons of its group, failing the jobs over a lost
// group, the link shares of jobs moving data at once, and ending a job.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "conductor/daemon.hpp"
#include "config/log.hpp"

namespace nodecomm::daemon {

size_t Daemon::work_on(ServedJob& served, uint64_t now) {
  Job& job = served.job();
  Engine& engine = served.engine();
  size_t work = 0;
  if (job.state == Job::State::kForming) {
    work += served.group_formation != 0 ? progress_group(served) : progress_formation(served);
  }
  if (job.state == Job::State::kRunning) work += exchange_notices(served);
  if (job.state == Job::State::kRunning || engine.has_inter_node_work()) {
    work += engine.poll(job, now);
    for (ClientSession* member : job.members) {
      if (member != nullptr && !member->violation.empty() &&
          member->state() != ClientSession::State::kClosed) {
        drop(*member, "protocol violation: " + member->violation);
        ++work;
      }
    }
  }
  return work;
}

size_t Daemon::send_notices(ServedJob& served) {
  const Job& job = served.job();
  size_t work = 0;
  for (const auto& [rank, status, text] : served.engine().take_notices()) {
    if (job.node_count > 1) served.transport().send_notice(job.mine.job_hash, rank, status, text);
    ++work;
  }
  return work;
}

size_t Daemon::exchange_notices(ServedJob& served) {
  Job& job = served.job();
  size_t work = send_notices(served);
  uint64_t tag = 0;
  uint32_t rank = 0;
  proto::Status status = proto::Status::kPeerLost;
  std::string text;
  // Each job's group is its own, or the daemon's when jobs run one at a time: a notice for
  // another tag is a previous job's.
  while (served.transport().poll_notice(tag, rank, status, text)) {
    ++work;
    if (tag != job.mine.job_hash) continue;
    NC_LOG(kWarn, "job {}: {}", job.name, text);
    served.engine().remote_failure(job, rank, status, text);
  }
  return work;
}

void Daemon::fail_jobs_over(const Transport& group, const std::string& text) {
  for (auto& [name, served] : jobs_) {
    if (&served->transport() != &group) continue;
    Job& job = served->job();
    if (job.state == Job::State::kRunning) {
      served->engine().node_lost(job, text);
    } else if (job.state == Job::State::kForming) {
      job.state = Job::State::kFailed;
      send_job_ready(job, proto::Status::kPeerLost, text);
    }
  }
}

void Daemon::share_links(uint64_t now) {
  std::vector<LinkUser> users;
  std::vector<ServedJob*> served_users;
  for (auto& [name, served] : jobs_) {
    const Job& job = served->job();
    if (job.state != Job::State::kRunning || job.node_count < 2) {
      served->engine().set_link_share({});
      continue;
    }
    users.push_back({name, served->weight, served->nominal_window(), served->bytes_on_network(),
                     served->bytes_completed()});
    served_users.push_back(served.get());
  }
  const std::vector<LinkGrant> grants = link_sharer_.share(now, users);
  for (size_t i = 0; i < grants.size(); ++i)
    served_users[i]->engine().set_link_share({grants[i].window, grants[i].chunk});
}

ServedJob* Daemon::served_of(const ClientSession& client) {
  if (client.job == nullptr) return nullptr;
  const auto it = jobs_.find(client.job->name);
  return it != jobs_.end() && &it->second->job() == client.job ? it->second.get() : nullptr;
}

void Daemon::end_job(ServedJob& served) {
  Job& job = served.job();
  // A failure found in this turn's engine pass must still reach the other nodes: their
  // ranks would otherwise wait for their timeout.
  send_notices(served);
  if (served.group_formation != 0) job_groups_->cancel(served.group_formation);
  if (job.state != Job::State::kAttaching) NC_LOG(kInfo, "job {} ended", job.name);
  for (ClientSession* member : job.members) {
    if (member != nullptr) member->job = nullptr;
  }
}

}  // namespace nodecomm::daemon
