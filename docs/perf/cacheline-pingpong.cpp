// The floor of any shared-memory round trip on this machine: two processes pass a counter back
// and forth through two cache lines, one line each way, spinning. A round trip through the
// daemon moves several such lines each way (descriptor slot and position, data, completion slot
// and position, doorbell), so its time is best read as a multiple of this one.
//   g++ -O2 -std=c++20 -o /tmp/pingpong docs/perf/cacheline-pingpong.cpp && /tmp/pingpong
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <new>

namespace {

struct alignas(64) Line {
  std::atomic<unsigned long> value{0};
};

void spin_until(const Line& line, unsigned long v) {
  // acquire: pairs with the other side's release store of v.
  while (line.value.load(std::memory_order_acquire) != v) __builtin_ia32_pause();
}

}  // namespace

int main() {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 1;
  Line* ping = new (mem) Line;
  Line* pong = new (static_cast<char*>(mem) + 64) Line;
  constexpr unsigned long kTrips = 1'000'000;
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    for (unsigned long i = 1; i <= kTrips; ++i) {
      spin_until(*ping, i);
      pong->value.store(i, std::memory_order_release);  // release: the reply follows the read
    }
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  for (unsigned long i = 1; i <= kTrips; ++i) {
    ping->value.store(i, std::memory_order_release);  // release: nothing else to publish
    spin_until(*pong, i);
  }
  const std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
  waitpid(child, nullptr, 0);
  std::printf("cache-line round trip between two processes: %.3f us\n", took.count() / kTrips);
  return 0;
}
