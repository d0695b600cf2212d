// The MLSL layer's process-wide state: the nodecomm context, the global communicator, the
// settings read from MLSL_* variables, memory handed out by Environment::Alloc, the objects a C
// handle may name, and the one way misuse ends a process (MLSL asserts: message, exit 1).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_set>

#include "handles.hpp"
#include "mlsl.hpp"
#include "nodecomm.h"

namespace nodecomm::mlsl {

// The implementation speaks MLSL's types (DataType, CommReq, ...) throughout.
using namespace ::MLSL;  // NOLINT(google-build-using-namespace): internal header only

// What MLSL asserts on, and every failure nodecomm reports: thrown inside the library, turned
// into the fatal exit by the public entry point that was called (entry()).
struct Misuse : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Prints "mlsl[<rank>]: <function>: <message>" on stderr, detaches from the daemon (so the
// job's other ranks hear of it at once) and exits 1, as MLSL's assertions exit.
[[noreturn]] void fatal(const char* function, const std::string& message);

// MLSL's assertion: throws Misuse(message) unless `ok`. For set-up calls; on a collective's
// path test first and build the message only when it fails.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw Misuse(message);
}

// The same for the accessors programs call in their inner loops (MLSL's getters are field
// reads, and its examples call them per element): `message` is a callable, run only on failure.
// Building the message every time made GetLocalMinibatchSize and GetInput allocate, and half of
// mlsl_train's CPU time was strings.
template <class Message>
requires std::is_invocable_r_v<std::string, Message>
inline void require(bool ok, Message&& message) {
  if (!ok) throw Misuse(message());
}

// Runs one public method's body; any exception becomes fatal() naming the method.
template <class Body>
auto entry(const char* function, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    fatal(function, e.what());
  }
}

// "<what>: <nodecomm status>: <nc_last_error()>".
std::string describe_nc(const std::string& what, nc_status_t status);
inline void check_nc(nc_status_t status, const std::string& what) {
  if (status != NC_OK) throw Misuse(describe_nc(what, status));
}

nc_dtype_t to_nc(DataType type);
size_t size_of(DataType type);
nc_redop_t to_nc(ReductionType op);  // RT_MIN is 1 in MLSL, NC_MIN is 2: never a cast

struct Settings {
  int log_level = 0;  // MLSL_LOG_LEVEL: 0 error, 1 info, 2 debug, 3 trace
  bool stats = false;
  bool priority = false;  // MLSL_MSG_PRIORITY
  size_t priority_threshold = 10000;
  int priority_mode = 1;  // 1 LIFO, 0 FIFO
  nc_compress_t quant = NC_COMPRESS_INT8;
};

// Memory from the arena when there is room (the zero-copy path), else from the heap. Owned by
// one exchange or one comm buffer; freed with it.
class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(size_t bytes);
  Scratch(Scratch&& other) noexcept;
  Scratch& operator=(Scratch&& other) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool arena_ = false;
};

class Engine;

// The singleton Environment::GetEnv returns; it has no state of its own (Runtime holds it).
class EnvironmentImpl : public Environment {
 public:
  EnvironmentImpl();
};

class Runtime {
 public:
  static Runtime& get();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  void init();
  void finalize();
  void configure(const char* config);
  bool initialized() const { return initialized_; }
  // Throws Misuse naming `what` unless Init has run and Finalize has not.
  void require_init(const char* what) const;

  nc_context_t* ctx() const { return ctx_; }
  nc_comm_t global() const { return global_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const Settings& settings() const { return settings_; }
  Engine& engine() { return *engine_; }

  void* alloc(size_t bytes, size_t alignment);
  void free(void* ptr);
  // Arena first, heap when the arena is full or not mapped; `arena` says which.
  void* raw_alloc(size_t bytes, bool* arena);
  void raw_free(void* ptr, bool arena);

  void set_quant(const QuantParams* params);
  QuantParams* quant() { return quant_set_ ? &quant_ : nullptr; }

  void add_live(HandleKind kind, const void* object);
  void remove_live(HandleKind kind, const void* object);
  bool is_live(HandleKind kind, const void* object) const;

  // Priority of the next gradient or collective of `bytes` (MLSL_MSG_PRIORITY, docs/MLSL.md).
  int32_t priority_for(size_t bytes);
  int32_t critical_priority() const;  // activations: never held back

  void log(int level, const std::string& message) const;

 private:
  Runtime();
  ~Runtime();
  void read_settings();
  void warn_ignored() const;

  bool initialized_ = false;
  bool finalized_ = false;
  long init_pid_ = 0;
  nc_context_t* ctx_ = nullptr;
  nc_comm_t global_ = NC_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
  bool has_color_ = false;
  int color_ = 0;
  Settings settings_;
  std::unique_ptr<Engine> engine_;
  struct Allocation {
    void* base;
    bool arena;
  };
  std::map<void*, Allocation> allocations_;
  bool heap_warned_ = false;
  QuantParams quant_{};
  bool quant_set_ = false;
  std::array<std::string, 4> quant_strings_;
  std::array<std::unordered_set<const void*>, 8> live_;
  uint64_t starts_ = 0;
};

}  // namespace nodecomm::mlsl
