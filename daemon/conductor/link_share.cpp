#include "conductor/link_share.hpp"

#include <algorithm>
#include <cmath>

#include "engine/schedule.hpp"

namespace nodecomm::daemon {

std::vector<LinkGrant> LinkSharer::share(uint64_t now, const std::vector<LinkUser>& users) {
  // Jobs that ended are forgotten; a job seen for the first time starts unscaled.
  for (auto it = states_.begin(); it != states_.end();) {
    const bool present = std::any_of(users.begin(), users.end(),
                                     [&](const LinkUser& u) { return u.name == it->first; });
    it = present ? std::next(it) : states_.erase(it);
  }
  std::vector<const LinkUser*> active;
  for (const LinkUser& user : users) {
    State& state = states_[user.name];
    if (user.on_network > 0) state.active_ns = now;
    if (state.active_ns != 0 && now - state.active_ns <= kLingerNs) active.push_back(&user);
  }
  if (now - sample_ns_ >= kSampleNs) {
    sample(now, users);
    if (active.size() >= 2) correct(active);
  }
  std::vector<LinkGrant> grants(users.size());
  if (active.size() < 2) {
    for (auto& [name, state] : states_) state.scale = 1;
    return grants;
  }
  size_t windows = 0;
  size_t on_network = 0;
  double weighted = 0;
  for (const LinkUser* user : active) {
    windows += user->nominal_window;
    on_network += user->on_network;
    weighted += user->weight * states_[user->name].scale;
  }
  const auto fair = [&](const LinkUser& user) {
    return static_cast<size_t>(static_cast<double>(windows) * user.weight *
                               states_[user.name].scale / weighted);
  };
  // One chunk size for all, small enough that the lightest job keeps two chunks in flight.
  size_t lightest = windows;
  for (const LinkUser* user : active) lightest = std::min(lightest, fair(*user));
  const size_t chunk = std::clamp(lightest / 2, kMinChunkBytes, kMaxChunkBytes);
  for (size_t i = 0; i < users.size(); ++i) {
    const LinkUser& user = users[i];
    if (std::find(active.begin(), active.end(), &user) == active.end()) continue;
    // What the others leave unused may be borrowed; as they take their share back, their
    // bytes on the network grow and this shrinks to the fair share.
    const size_t others = on_network - user.on_network;
    const size_t unused = windows > others ? windows - others : 0;
    grants[i] = {std::max({fair(user), unused, chunk}), chunk};
  }
  return grants;
}

void LinkSharer::sample(uint64_t now, const std::vector<LinkUser>& users) {
  const double seconds = static_cast<double>(now - sample_ns_) / 1e9;
  for (const LinkUser& user : users) {
    State& state = states_[user.name];
    // A communicator freed since takes its bytes with it: no rate from this period.
    state.rate = state.sampled && user.completed_bytes >= state.sample_bytes
                     ? static_cast<double>(user.completed_bytes - state.sample_bytes) / seconds
                     : -1;
    state.sample_bytes = user.completed_bytes;
    state.sampled = true;
  }
  sample_ns_ = now;
}

void LinkSharer::correct(const std::vector<const LinkUser*>& active) {
  double total = 0;
  double weights = 0;
  for (const LinkUser* user : active) {
    const State& state = states_[user->name];
    if (state.rate < 0) return;  // a job without a full period yet
    total += state.rate;
    weights += user->weight;
  }
  if (total <= 0) return;
  double weighted = 0;
  for (const LinkUser* user : active) {
    State& state = states_[user->name];
    const double target = user->weight / weights;
    // A job that moved nothing this period gets the most the feedback allows, not infinity.
    const double got = std::max(state.rate / total, target / kMaxScale);
    // Half the correction each period: the response to a window is not linear, and rates
    // measured over 50 ms are noisy.
    state.scale = std::clamp(state.scale * std::sqrt(target / got), 1 / kMaxScale, kMaxScale);
    weighted += user->weight * state.scale;
  }
  // Only the ratios matter; keeping their weighted mean at 1 keeps them within bounds.
  const double norm = weights / weighted;
  for (const LinkUser* user : active) {
    State& state = states_[user->name];
    state.scale = std::clamp(state.scale * norm, 1 / kMaxScale, kMaxScale);
  }
}

double LinkSharer::scale(const std::string& name) const {
  const auto it = states_.find(name);
  return it == states_.end() ? 1 : it->second.scale;
}

}  // namespace nodecomm::daemon
