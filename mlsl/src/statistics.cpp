// Statistics (MLSL_STATS=1): per operation, the time spent inside the layer's exchange calls
// (comm), the time between them (compute, attributed to the operation whose call ends it), the
// bytes each start sends, and the time one exchange of each takes alone (isolation, measured
// at Commit). Cycles are the time-stamp counter on x86-64, nanoseconds elsewhere.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>

#include "impl.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#else
#include <chrono>
#endif

namespace nodecomm::mlsl {

namespace {
// MLSL's isolation run: 10 iterations, the first 4 a warm-up.
constexpr int statistics_iterations = 10;
constexpr int statistics_warmup = 4;

}  // namespace

unsigned long long stats_now() {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now().time_since_epoch())
                                             .count());
#endif
}

StatisticsImpl::StatisticsImpl(SessionImpl* session)
    : session(session), enabled(Runtime::get().settings().stats) {
  Runtime::get().add_live(HandleKind::statistics, this);
}

StatisticsImpl::~StatisticsImpl() {
  Runtime::get().remove_live(HandleKind::statistics, this);
}

void StatisticsImpl::resize_for(size_t ops) {
  comm_cycles.assign(ops, 0);
  compute_cycles.assign(ops, 0);
  isolation_cycles.assign(ops, 0);
  comm_bytes.assign(ops, 0);
}

void StatisticsImpl::enter(size_t op) {
  if (!started || op >= comm_cycles.size()) return;
  const unsigned long long now = stats_now();
  if (last_event != 0) compute_cycles[op] += now - last_event;
  entered = now;
}

void StatisticsImpl::leave(size_t op, size_t bytes) {
  if (!started || op >= comm_cycles.size()) return;
  const unsigned long long now = stats_now();
  comm_cycles[op] += now - entered;
  comm_bytes[op] += bytes;
  last_event = now;
}

void StatisticsImpl::require_op(size_t op, const char* call) const {
  if (op >= comm_cycles.size()) {
    throw Misuse(std::string(call) + ": operation " + std::to_string(op) + " of " +
                 std::to_string(comm_cycles.size()) + " (is the session committed?)");
  }
}

namespace {
// One exchange started and waited on scratch memory, `statistics_iterations` times; returns the
// cycles of the measured iterations.
unsigned long long statistics_time(const std::function<void()>& once) {
  unsigned long long total = 0;
  for (int i = 0; i < statistics_iterations; ++i) {
    const unsigned long long t0 = stats_now();
    once();
    if (i >= statistics_warmup) total += stats_now() - t0;
  }
  return total;
}
}  // namespace

void StatisticsImpl::measure_isolation() {
  // Every rank runs the same exchanges in operation order, so the collectives line up.
  for (auto& op : session->ops) {
    unsigned long long cycles = 0;
    // An operation's entities: its outputs (forward, to the consumer) and its inputs
    // (backward, to the producer); each is credited to the operation that starts it.
    std::vector<std::pair<ActivationImpl*, ActivationImpl*>> sends;
    for (auto& out : op->outputs) {
      if (out->peer != nullptr) sends.emplace_back(out.get(), out->peer);
    }
    for (auto& in : op->inputs) {
      if (in->peer != nullptr) sends.emplace_back(in.get(), in->peer);
    }
    for (const auto& [from_end, to_end] : sends) {
      ActivationImpl* from = from_end;
      ActivationImpl* to = to_end;
      if (from->plan.kind == SendPlan::Kind::none && !from->plan.permute) continue;
      Scratch buf(from->plan.buffer_elems * size_of(from->type));
      std::memset(buf.data(), 0, buf.bytes());
      cycles += statistics_time([&] {
        from->start(buf.data());
        to->wait();
      });
      from->request.forget_history();
    }
    for (auto& p : op->params) {
      if (!p->part.exchange) continue;
      Scratch buf(p->part.local * p->shape.kernel_size * size_of(p->shape.type));
      std::memset(buf.data(), 0, buf.bytes());
      cycles += statistics_time([&] {
        p->start_gradient(buf.data());
        p->gradient.wait();
      });
      if (p->shape.distributed_update) {
        cycles += statistics_time([&] {
          p->start_increment(buf.data());
          p->increment.wait();
        });
      }
      p->gradient.forget_history();
      p->increment.forget_history();
    }
    isolation_cycles[op->index] = cycles / (statistics_iterations - statistics_warmup);
  }
}

}  // namespace nodecomm::mlsl

namespace MLSL {

using nodecomm::mlsl::entry;
using nodecomm::mlsl::HandleKind;
using nodecomm::mlsl::impl_of;
using nodecomm::mlsl::require;
using nodecomm::mlsl::Runtime;
using nodecomm::mlsl::StatisticsImpl;

namespace {
StatisticsImpl& statistics_self(Statistics* s) {
  return impl_of<StatisticsImpl>(s, HandleKind::statistics, "Statistics");
}

template <class T>
T statistics_sum(const std::vector<T>& values) {
  T total = 0;
  for (T v : values) total += v;
  return total;
}
}  // namespace

void Statistics::Start() {
  entry("Statistics::Start", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return;
    require(!s.started, "statistics are started already");
    s.started = true;
    s.last_event = 0;
  });
}

void Statistics::Stop() {
  entry("Statistics::Stop", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return;
    require(s.started, "statistics are not started");
    s.started = false;
  });
}

void Statistics::Reset() {
  entry("Statistics::Reset", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return;
    require(!s.started, "Reset needs the statistics stopped");
    std::fill(s.comm_cycles.begin(), s.comm_cycles.end(), 0);
    std::fill(s.compute_cycles.begin(), s.compute_cycles.end(), 0);
    std::fill(s.comm_bytes.begin(), s.comm_bytes.end(), 0);
    s.last_event = 0;
  });
}

bool Statistics::IsStarted() {
  return entry("Statistics::IsStarted", [&] { return statistics_self(this).started; });
}

bool Statistics::IsEnabled() {
  return entry("Statistics::IsEnabled", [&] { return statistics_self(this).enabled; });
}

void Statistics::Print() {
  entry("Statistics::Print", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return;
    require(!s.started, "Print needs the statistics stopped");
    if (Runtime::get().rank() != 0) return;
    std::string table = "# mlsl statistics, session " + std::to_string(s.session->id) +
                        " (cycles: time-stamp counter)\n"
                        "# op name comm_bytes comm_cycles compute_cycles isolation_cycles\n";
    for (size_t i = 0; i < s.comm_cycles.size(); ++i) {
      table += std::to_string(i) + " " + s.session->ops[i]->name + " " +
               std::to_string(s.comm_bytes[i]) + " " + std::to_string(s.comm_cycles[i]) + " " +
               std::to_string(s.compute_cycles[i]) + " " + std::to_string(s.isolation_cycles[i]) +
               "\n";
    }
    table += "total - " + std::to_string(statistics_sum(s.comm_bytes)) + " " +
             std::to_string(statistics_sum(s.comm_cycles)) + " " +
             std::to_string(statistics_sum(s.compute_cycles)) + " " +
             std::to_string(statistics_sum(s.isolation_cycles)) + "\n";
    std::fputs(table.c_str(), stdout);
    std::fflush(stdout);
    if (FILE* f = std::fopen("mlsl_stats.log", "a")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
  });
}

unsigned long long Statistics::GetIsolationCommCycles(size_t opIdx) {
  return entry("Statistics::GetIsolationCommCycles", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return 0ULL;
    s.require_op(opIdx, "GetIsolationCommCycles");
    return s.isolation_cycles[opIdx];
  });
}

size_t Statistics::GetCommSize(size_t opIdx) {
  return entry("Statistics::GetCommSize", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return size_t{0};
    s.require_op(opIdx, "GetCommSize");
    return s.comm_bytes[opIdx];
  });
}

unsigned long long Statistics::GetCommCycles(size_t opIdx) {
  return entry("Statistics::GetCommCycles", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return 0ULL;
    s.require_op(opIdx, "GetCommCycles");
    return s.comm_cycles[opIdx];
  });
}

unsigned long long Statistics::GetComputeCycles(size_t opIdx) {
  return entry("Statistics::GetComputeCycles", [&] {
    auto& s = statistics_self(this);
    if (!s.enabled) return 0ULL;
    s.require_op(opIdx, "GetComputeCycles");
    return s.compute_cycles[opIdx];
  });
}

unsigned long long Statistics::GetTotalIsolationCommCycles() {
  return entry("Statistics::GetTotalIsolationCommCycles",
               [&] { return statistics_sum(statistics_self(this).isolation_cycles); });
}

size_t Statistics::GetTotalCommSize() {
  return entry("Statistics::GetTotalCommSize",
               [&] { return statistics_sum(statistics_self(this).comm_bytes); });
}

unsigned long long Statistics::GetTotalCommCycles() {
  return entry("Statistics::GetTotalCommCycles",
               [&] { return statistics_sum(statistics_self(this).comm_cycles); });
}

unsigned long long Statistics::GetTotalComputeCycles() {
  return entry("Statistics::GetTotalComputeCycles",
               [&] { return statistics_sum(statistics_self(this).compute_cycles); });
}

}  // namespace MLSL
