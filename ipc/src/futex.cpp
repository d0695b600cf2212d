#include "nodecomm/ipc/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>

namespace nodecomm::ipc {

void futex_wait(uint32_t* word, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ULL),
              static_cast<long>(timeout_ns % 1000000000ULL)};
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE, 0x7fffffff, nullptr, nullptr, 0);
}

}  // namespace nodecomm::ipc
