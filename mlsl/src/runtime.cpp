#include "runtime.hpp"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "requests.hpp"

namespace nodecomm::mlsl {

namespace {

// MLSL variables that configure its endpoint servers or message splitting: the node's nodecommd
// does that work here, so they are reported once and otherwise ignored.
struct RuntimeIgnored {
  const char* name;
  const char* reason;
};
constexpr const char* runtime_servers_reason =
    "the node's nodecommd does this work: its --cores and --endpoints, and the service setup "
    "in docs/OPERATIONS.md";
constexpr const char* runtime_split_reason =
    "the daemon chunks and fuses messages itself (nodecommd --sched-chunk-size, "
    "--fusion-threshold, --sched-eager-bytes)";
constexpr RuntimeIgnored runtime_ignored[] = {
    {"MLSL_NUM_SERVERS", runtime_servers_reason},
    {"MLSL_SERVER_AFFINITY", runtime_servers_reason},
    {"MLSL_DYNAMIC_SERVER", runtime_servers_reason},
    {"MLSL_SERVER_CREATION_TYPE", runtime_servers_reason},
    {"MLSL_SERVER_PREFIX", runtime_servers_reason},
    {"MLSL_HOSTNAME", runtime_servers_reason},
    {"MLSL_HOSTNAME_TYPE", runtime_servers_reason},
    {"MLSL_IFACE_NAME", runtime_servers_reason},
    {"MLSL_IFACE_IDX", runtime_servers_reason},
    {"MLSL_MAX_SHORT_MSG_SIZE", runtime_split_reason},
    {"MLSL_LARGE_MSG_SIZE_MB", runtime_split_reason},
    {"MLSL_LARGE_MSG_CHUNKS", runtime_split_reason},
    {"MLSL_ALLTOALL_SPLIT", runtime_split_reason},
    {"MLSL_ALLTOALLV_SPLIT", runtime_split_reason},
    {"MLSL_USE_COPY_THREADS", "the daemon copies and reduces on its own cores"},
    {"MLSL_COPY_THREADS", "the daemon copies and reduces on its own cores"},
    {"MLSL_COPY_THRESHOLD", "the daemon copies and reduces on its own cores"},
    {"MLSL_THP_THRESHOLD_MB", "the arena's pages are the daemon's"},
    {"MLSL_CHECK_MEM_SIZE", "the arena's size is NODECOMM_ARENA_BYTES or MLSL_HEAP_SIZE_GB"},
    {"MLSL_CHECK_SINGLE_NODE", "one node is a nodecomm cluster of one"},
    {"MLSL_AUTO_CONFIG_TYPE", "nothing to configure"},
    {"MLSL_USE_MPI_FORCE", "programs never call MPI under nodecomm"},
};

long runtime_env_long(const char* name, long fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0') {
    throw Misuse(std::string(name) + "=" + text + " is not an integer");
  }
  return value;
}

bool runtime_is_power_of_two(size_t n) {
  return n != 0 && (n & (n - 1)) == 0;
}

}  // namespace

[[noreturn]] void fatal(const char* function, const std::string& message) {
  Runtime& rt = Runtime::get();
  std::fprintf(stderr, "mlsl[%d]: %s: %s\n", rt.initialized() ? rt.rank() : -1, function,
               message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (rt.ctx() != nullptr) nc_finalize(rt.ctx());
  _exit(1);
}

std::string describe_nc(const std::string& what, nc_status_t status) {
  std::string text = what + ": " + nc_status_string(status);
  const char* detail = nc_last_error();
  if (detail != nullptr && *detail != '\0') text += std::string(" (") + detail + ")";
  return text;
}

nc_dtype_t to_nc(DataType type) {
  switch (type) {
    case DT_FLOAT:
      return NC_F32;
    case DT_DOUBLE:
      return NC_F64;
    case DT_BYTE:
      return NC_U8;
  }
  throw Misuse("unknown DataType " + std::to_string(static_cast<int>(type)));
}

size_t size_of(DataType type) {
  return nc_dtype_size(to_nc(type));
}

nc_redop_t to_nc(ReductionType op) {
  switch (op) {
    case RT_SUM:
      return NC_SUM;
    case RT_MIN:
      return NC_MIN;
    case RT_MAX:
      return NC_MAX;
  }
  throw Misuse("unknown ReductionType " + std::to_string(static_cast<int>(op)));
}

Scratch::Scratch(size_t bytes) : bytes_(bytes) {
  data_ = Runtime::get().raw_alloc(bytes == 0 ? 1 : bytes, &arena_);
}

Scratch::Scratch(Scratch&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), arena_(other.arena_) {
  other.data_ = nullptr;
}

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    arena_ = other.arena_;
    other.data_ = nullptr;
  }
  return *this;
}

Scratch::~Scratch() {
  release();
}

void Scratch::release() {
  if (data_ != nullptr) Runtime::get().raw_free(data_, arena_);
  data_ = nullptr;
}

Runtime::Runtime() = default;
Runtime::~Runtime() = default;

Runtime& Runtime::get() {
  // Never destroyed: objects a program never deletes may still reach it from static
  // destructors after main returns.
  static auto* runtime = new Runtime();
  return *runtime;
}

void Runtime::read_settings() {
  settings_.log_level = static_cast<int>(runtime_env_long("MLSL_LOG_LEVEL", 0));
  settings_.stats = runtime_env_long("MLSL_STATS", 0) != 0;
  settings_.priority = runtime_env_long("MLSL_MSG_PRIORITY", 0) != 0;
  settings_.priority_threshold =
      static_cast<size_t>(runtime_env_long("MLSL_MSG_PRIORITY_THRESHOLD", 10000));
  settings_.priority_mode = static_cast<int>(runtime_env_long("MLSL_MSG_PRIORITY_MODE", 1));
  const char* quant = std::getenv("NODECOMM_MLSL_QUANT");
  settings_.quant = NC_COMPRESS_INT8;
  if (quant != nullptr && *quant != '\0' && nc_compress_parse(quant, &settings_.quant) != NC_OK) {
    throw Misuse(std::string("NODECOMM_MLSL_QUANT=") + quant +
                 " is not one of int8, bf16, f16, none");
  }
}

void Runtime::warn_ignored() const {
  if (rank_ != 0) return;
  for (const RuntimeIgnored& v : runtime_ignored) {
    const char* value = std::getenv(v.name);
    if (value != nullptr) {
      std::fprintf(stderr, "mlsl: %s=%s is ignored under nodecomm (%s)\n", v.name, value, v.reason);
    }
  }
}

void Runtime::configure(const char* config) {
  if (config == nullptr || *config == '\0') return;
  const std::string text(config);
  const std::string key = "color=";
  if (text.compare(0, key.size(), key) != 0) {
    if (rank_ == 0 || !initialized_) {
      std::fprintf(stderr, "mlsl: Configure(\"%s\"): only color=<int> is understood; ignored\n",
                   config);
    }
    return;
  }
  char* end = nullptr;
  const long color = std::strtol(text.c_str() + key.size(), &end, 10);
  if (end == text.c_str() + key.size() || *end != '\0' || color < 0 || color > INT_MAX) {
    throw Misuse("Configure(\"" + text + "\"): the color must be a non-negative integer");
  }
  has_color_ = true;
  color_ = static_cast<int>(color);
  if (!initialized_) return;  // applied by Init
  nc_comm_t split = NC_COMM_NULL;
  check_nc(nc_comm_split(ctx_, global_, color_, rank_, &split),
           "Configure: splitting the global group by color " + std::to_string(color_));
  nc_comm_t old = global_;
  global_ = split;
  check_nc(nc_comm_free(ctx_, &old), "Configure: releasing the previous global group");
  int r = 0;
  int n = 0;
  nc_comm_rank(ctx_, global_, &r);
  nc_comm_size(ctx_, global_, &n);
  rank_ = r;
  size_ = n;
}

void Runtime::init() {
  if (initialized_ || finalized_) {
    throw Misuse("the library can be initialized only once per process");
  }
  read_settings();
  nc_init_options_t options;
  nc_init_options_default(&options);
  const long heap_gb = runtime_env_long("MLSL_HEAP_SIZE_GB", 0);
  if (heap_gb > 0 && std::getenv("NODECOMM_ARENA_BYTES") == nullptr) {
    options.arena_bytes = static_cast<uint64_t>(heap_gb) << 30;
  }
  check_nc(nc_init(&options, &ctx_), "Init: attaching to the node's nodecommd");
  engine_ = std::make_unique<Engine>(ctx_);
  init_pid_ = static_cast<long>(getpid());
  if (has_color_) {
    check_nc(nc_comm_split(ctx_, NC_COMM_WORLD, color_, nc_world_rank(ctx_), &global_),
             "Init: splitting the world by color " + std::to_string(color_));
  } else {
    check_nc(nc_comm_dup(ctx_, NC_COMM_WORLD, &global_), "Init: the global group");
  }
  int r = 0;
  int n = 0;
  nc_comm_rank(ctx_, global_, &r);
  nc_comm_size(ctx_, global_, &n);
  rank_ = r;
  size_ = n;
  initialized_ = true;
  warn_ignored();
  log(1, "initialized: process " + std::to_string(rank_) + " of " + std::to_string(size_));
}

void Runtime::finalize() {
  if (!initialized_) {
    log(1, "Finalize: not initialized, nothing to do");
    return;
  }
  if (static_cast<long>(getpid()) != init_pid_) return;  // a forked child: the parent's job
  engine_->finish_all();
  if (engine_->unwaited() != 0) {
    log(1, std::to_string(engine_->unwaited()) + " requests were never waited");
  }
  nc_request_t req = 0;
  if (nc_barrier(ctx_, global_, nullptr, &req) == NC_OK) nc_wait(ctx_, req);
  allocations_.clear();  // the arena goes with the context
  nc_finalize(ctx_);
  ctx_ = nullptr;
  initialized_ = false;
  finalized_ = true;
}

void Runtime::require_init(const char* what) const {
  if (!initialized_) {
    throw Misuse(std::string(what) + " needs Environment::Init first" +
                 (finalized_ ? " (Finalize was called)" : ""));
  }
}

void* Runtime::raw_alloc(size_t bytes, bool* arena) {
  void* ptr = nullptr;
  if (ctx_ != nullptr && nc_alloc(ctx_, bytes, &ptr) == NC_OK) {
    *arena = true;
    return ptr;
  }
  *arena = false;
  if (posix_memalign(&ptr, 4096, bytes) != 0) {
    throw Misuse("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  return ptr;
}

void Runtime::raw_free(void* ptr, bool arena) {
  if (!arena) {
    std::free(ptr);
  } else if (ctx_ != nullptr) {
    nc_free(ctx_, ptr);
  }
}

void* Runtime::alloc(size_t bytes, size_t alignment) {
  if (!runtime_is_power_of_two(alignment)) {
    throw Misuse("Alloc: alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (bytes == 0) bytes = 1;
  // nodecomm aligns arena blocks to 64 bytes, and to 4096 from 64 KiB.
  const size_t natural = bytes >= (64u << 10) ? 4096 : 64;
  const size_t extra = alignment > natural ? alignment : 0;
  void* base = nullptr;
  bool arena = false;
  if (ctx_ != nullptr && nc_alloc(ctx_, bytes + extra, &base) == NC_OK) {
    arena = true;
  } else {
    if (!heap_warned_ && initialized_) {
      log(0, "Alloc: the arena has no block of " + std::to_string(bytes) +
                 " bytes; using the heap (exchanges on it are copied; raise "
                 "NODECOMM_ARENA_BYTES or MLSL_HEAP_SIZE_GB)");
      heap_warned_ = true;
    }
    if (posix_memalign(&base, alignment < sizeof(void*) ? sizeof(void*) : alignment, bytes) != 0) {
      return nullptr;
    }
  }
  const auto address = reinterpret_cast<uintptr_t>(base);
  size_t shift = 0;
  if (arena && extra != 0)
    shift = ((address + alignment - 1) & ~(uintptr_t{alignment} - 1)) - address;
  void* ptr = static_cast<char*>(base) + shift;
  allocations_[ptr] = Allocation{base, arena};
  return ptr;
}

void Runtime::free(void* ptr) {
  if (ptr == nullptr) return;
  const auto it = allocations_.find(ptr);
  if (it == allocations_.end()) {
    if (finalized_) return;  // Finalize released the arena and its records
    throw Misuse("Free: pointer was not returned by Environment::Alloc (or was freed already)");
  }
  raw_free(it->second.base, it->second.arena);
  allocations_.erase(it);
}

void Runtime::set_quant(const QuantParams* params) {
  if (quant_set_) throw Misuse("SetQuantizationParams: the parameters can be set only once");
  if (params == nullptr) throw Misuse("SetQuantizationParams: params is NULL");
  const char* fields[4] = {params->lib_path, params->quant_buffer_func_name,
                           params->dequant_buffer_func_name, params->reduce_sum_func_name};
  char** copies[4] = {&quant_.lib_path, &quant_.quant_buffer_func_name,
                      &quant_.dequant_buffer_func_name, &quant_.reduce_sum_func_name};
  for (int i = 0; i < 4; ++i) {
    quant_strings_[i] = fields[i] != nullptr ? fields[i] : "";
    *copies[i] = fields[i] != nullptr ? quant_strings_[i].data() : nullptr;
  }
  quant_.block_size = params->block_size;
  quant_.elem_in_block = params->elem_in_block;
  quant_set_ = true;
  log(1, std::string("SetQuantizationParams: ") +
             (params->lib_path != nullptr ? params->lib_path : "(no library)") +
             " is not loaded; CT_QUANTIZATION uses nodecomm's wire compression "
             "(NODECOMM_MLSL_QUANT)");
  if (params->elem_in_block != 0 && params->elem_in_block != 256 && rank_ == 0) {
    std::fprintf(stderr,
                 "mlsl: QuantParams.elem_in_block=%zu: nodecomm's int8 blocks hold 256 values\n",
                 params->elem_in_block);
  }
}

void Runtime::add_live(HandleKind kind, const void* object) {
  live_[static_cast<size_t>(kind)].insert(object);
}
void Runtime::remove_live(HandleKind kind, const void* object) {
  live_[static_cast<size_t>(kind)].erase(object);
}
bool Runtime::is_live(HandleKind kind, const void* object) const {
  return live_[static_cast<size_t>(kind)].count(object) != 0;
}

int32_t Runtime::critical_priority() const {
  return settings_.priority ? INT32_MAX : 0;
}

int32_t Runtime::priority_for(size_t bytes) {
  const uint64_t start = starts_++;
  if (!settings_.priority) return 0;
  if (bytes <= settings_.priority_threshold) return INT32_MAX;
  if (settings_.priority_mode == 0) return 1;
  // Newer starts get higher priorities: the last layer's gradients (needed first by the next
  // forward pass) overtake earlier ones, as MLSL's LIFO queue does.
  return 1 + static_cast<int32_t>(start % (1u << 30));
}

void Runtime::log(int level, const std::string& message) const {
  if (level > settings_.log_level) return;
  std::fprintf(level == 0 ? stderr : stdout, "mlsl[%d]: %s\n", rank_, message.c_str());
}

EnvironmentImpl::EnvironmentImpl() = default;

bool handle_is_live(HandleKind kind, const void* object) {
  return object != nullptr && Runtime::get().is_live(kind, object);
}

bool request_is_live(const void* token) {
  Runtime& rt = Runtime::get();
  return rt.initialized() && rt.engine().token_live(token);
}

}  // namespace nodecomm::mlsl

// Environment: the public entry points.
namespace MLSL {

using nodecomm::mlsl::entry;
using nodecomm::mlsl::Misuse;
using nodecomm::mlsl::Runtime;

Environment& Environment::GetEnv() {
  static auto* env = new nodecomm::mlsl::EnvironmentImpl();
  return *env;
}

int Environment::GetVersion() {
  return MLSL_VERSION(MLSL_MAJOR_VERSION, MLSL_MINOR_VERSION);
}

void Environment::Configure(const char* config) {
  entry("Environment::Configure", [&] { Runtime::get().configure(config); });
}

void Environment::Init(int* /*argc*/, char** /*argv*/[]) {
  entry("Environment::Init", [&] { Runtime::get().init(); });
}

void Environment::Finalize() {
  entry("Environment::Finalize", [&] { Runtime::get().finalize(); });
}

bool Environment::IsInitialized() {
  return Runtime::get().initialized();
}

size_t Environment::GetProcessIdx() {
  return entry("Environment::GetProcessIdx", [&] {
    Runtime::get().require_init("Environment::GetProcessIdx");
    return static_cast<size_t>(Runtime::get().rank());
  });
}

size_t Environment::GetProcessCount() {
  return entry("Environment::GetProcessCount", [&] {
    Runtime::get().require_init("Environment::GetProcessCount");
    return static_cast<size_t>(Runtime::get().size());
  });
}

void Environment::Wait(CommReq* req) {
  entry("Environment::Wait", [&] {
    Runtime& rt = Runtime::get();
    rt.require_init("Environment::Wait");
    nodecomm::mlsl::Exchange* x = rt.engine().find(req);
    if (!x->done()) rt.engine().wait(*x);
    rt.engine().release(req);
  });
}

void Environment::Test(CommReq* req, bool* isCompleted) {
  entry("Environment::Test", [&] {
    Runtime& rt = Runtime::get();
    rt.require_init("Environment::Test");
    if (isCompleted == nullptr) throw Misuse("isCompleted is NULL");
    nodecomm::mlsl::Exchange* x = rt.engine().find(req);
    *isCompleted = rt.engine().test(*x);
    if (*isCompleted) rt.engine().release(req);
  });
}

void* Environment::Alloc(size_t size, size_t alignment) {
  return entry("Environment::Alloc", [&] { return Runtime::get().alloc(size, alignment); });
}

void Environment::Free(void* ptr) {
  entry("Environment::Free", [&] { Runtime::get().free(ptr); });
}

void Environment::SetQuantizationParams(QuantParams* params) {
  entry("Environment::SetQuantizationParams", [&] { Runtime::get().set_quant(params); });
}

QuantParams* Environment::GetQuantizationParams() {
  return Runtime::get().quant();
}

}  // namespace MLSL
