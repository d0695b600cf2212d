// The objects behind MLSL's public classes. Each *Impl derives from the public class, which has
// no data and no virtual functions, so a public pointer converts to its Impl with a
// static_cast (impl_of) and programs bind to the public methods by name only.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "geometry.hpp"
#include "requests.hpp"
#include "runtime.hpp"

namespace nodecomm::mlsl {

class SessionImpl;
class OperationImpl;

class DistributionImpl : public Distribution {
 public:
  DistributionImpl(int id, nc_comm_t data, nc_comm_t model);
  ~DistributionImpl();
  int id() const { return id_; }
  nc_comm_t comm(GroupType group) const;
  int index(GroupType group) const;
  int count(GroupType group) const;
  nc_comm_t data_comm() const { return data_; }
  nc_comm_t model_comm() const { return model_; }
  int data_index() const { return data_index_; }
  int data_size() const { return data_size_; }
  int model_index() const { return model_index_; }
  int model_size() const { return model_size_; }
  std::string describe() const;  // "distribution 2 (2 data x 2 model)"

  // Operations that use it keep it (and its communicators) alive past DeleteDistribution.
  void acquire() { ++users_; }
  void release();
  void mark_deleted();

  // The collectives (distribution.cpp).
  CommReq* post(std::unique_ptr<Exchange> x);
  std::unique_ptr<Exchange> exchange(const char* call, GroupType group, size_t bytes);

 private:
  void free_comms();
  int id_;
  nc_comm_t data_;
  nc_comm_t model_;
  int data_index_ = 0;
  int data_size_ = 1;
  int model_index_ = 0;
  int model_size_ = 1;
  int users_ = 0;
  bool deleted_ = false;
};

struct ActivationShape {
  size_t fm_count;
  size_t fm_size;
  DataType type;
};

struct ParameterShape {
  size_t kernels;
  size_t kernel_size;
  DataType type;
  bool distributed_update;
  CompressionType compress;
};

class RegInfoImpl : public OperationRegInfo {
 public:
  RegInfoImpl(SessionImpl* session, OpType type) : session(session), type(type) {}
  SessionImpl* session;
  OpType type;
  std::string name;
  std::vector<ActivationShape> inputs;
  std::vector<ActivationShape> outputs;
  std::vector<ParameterShape> params;
};

class BlockImpl : public CommBlockInfo {
 public:
  BlockImpl(size_t mb_offset, size_t mb_count, size_t fm_offset, size_t fm_count, size_t fm_size,
            size_t buf_offset, DataType type)
      : mb_offset(mb_offset),
        mb_count(mb_count),
        fm_offset(fm_offset),
        fm_count(fm_count),
        fm_size(fm_size),
        buf_offset(buf_offset),
        type(type) {}
  ~BlockImpl();
  size_t mb_offset, mb_count, fm_offset, fm_count, fm_size, buf_offset;
  DataType type;
};

// How an activation sends (activation.cpp): one collective on the packed buffer, whose result
// lands in the same buffer at result_offset, where the peer unpacks it.
struct SendPlan {
  enum class Kind { none, reduce_scatter, allgather, allreduce, alltoall } kind = Kind::none;
  nc_comm_t comm = NC_COMM_NULL;
  size_t count = 0;          // elements per group member
  size_t send_offset = 0;    // elements: allgather's in-place send block
  size_t result_offset = 0;  // elements: where the peer's unpack blocks start
  size_t buffer_elems = 0;
  // Case 2 with several data parts: the reduced minibatch slice moves to the process whose
  // consumer slice it is (an alltoallv with one peer each way, on its own communicator).
  bool permute = false;
  nc_comm_t permute_comm = NC_COMM_NULL;
  int permute_to = -1;
  int permute_from = -1;
  size_t permute_count = 0;
  size_t permute_send_offset = 0;
};

class ActivationImpl : public Activation {
 public:
  ActivationImpl(OperationImpl* op, bool input, size_t index, const ActivationShape& shape);
  ~ActivationImpl();
  void assign_geometry();  // once the operation has a distribution
  void reset_plan();
  void start(void* buf);
  void* wait();
  std::string describe() const;

  OperationImpl* op;
  bool input;
  size_t index;
  size_t global_fm;
  size_t fm_size;
  DataType type;
  size_t local_fm = 0;
  size_t fm_offset = 0;
  bool need_reduce = false;
  ActivationImpl* peer = nullptr;
  std::vector<std::unique_ptr<BlockImpl>> pack;
  std::vector<std::unique_ptr<BlockImpl>> unpack;
  SendPlan plan;
  Scratch comm_buf;
  Persistent request;
  void* started_buf = nullptr;
};

// Builds both directions of the exchange between an output and its peer input (Commit).
void plan_exchange(ActivationImpl& out, ActivationImpl& in);

class ParameterSetImpl : public ParameterSet {
 public:
  ParameterSetImpl(OperationImpl* op, size_t index, const ParameterShape& shape);
  ~ParameterSetImpl();
  void assign_geometry();
  void prepare();  // Commit: the reduce-scatter's buffer
  void start_gradient(void* buf);
  void start_increment(void* buf);
  std::string describe() const;

  OperationImpl* op;
  size_t index;
  ParameterShape shape;
  ParameterPartition part;
  nc_compress_t compress = NC_COMPRESS_NONE;
  Scratch gradient_buf;
  Persistent gradient;
  Persistent increment;
};

class StatisticsImpl;

class OperationImpl : public Operation {
 public:
  OperationImpl(SessionImpl* session, size_t index, const RegInfoImpl& info);
  ~OperationImpl();
  void assign(DistributionImpl* dist);
  void require_distribution(const char* call) const;
  void settle();  // completes every exchange in flight (results kept)

  SessionImpl* session;
  size_t index;
  OpType type;
  std::string name;
  DistributionImpl* dist = nullptr;
  MinibatchSlice minibatch;
  std::vector<std::unique_ptr<ActivationImpl>> inputs;
  std::vector<std::unique_ptr<ActivationImpl>> outputs;
  std::vector<std::unique_ptr<ParameterSetImpl>> params;
};

class StatisticsImpl : public Statistics {
 public:
  explicit StatisticsImpl(SessionImpl* session);
  ~StatisticsImpl();
  // Around each Start/Wait/Test of an operation's exchange while collecting.
  void enter(size_t op);
  void leave(size_t op, size_t bytes);
  void isolation(size_t op, unsigned long long cycles);
  void require_op(size_t op, const char* call) const;
  void resize_for(size_t ops);
  // Commit, with MLSL_STATS=1: each exchange alone, on every rank in the same order.
  void measure_isolation();

  SessionImpl* session;
  bool enabled;
  bool started = false;
  unsigned long long last_event = 0;
  unsigned long long entered = 0;
  std::vector<unsigned long long> comm_cycles, compute_cycles, isolation_cycles;
  std::vector<size_t> comm_bytes;
};

unsigned long long stats_now();

class SessionImpl : public Session {
 public:
  SessionImpl(int id, PhaseType phase);
  ~SessionImpl();
  void remove_operations();

  int id;
  PhaseType phase;
  size_t global_mb = 0;
  bool committed = false;
  std::vector<std::unique_ptr<OperationImpl>> ops;
  std::vector<std::unique_ptr<RegInfoImpl>> infos;
  std::unique_ptr<StatisticsImpl> stats;
  std::vector<nc_comm_t> extra_comms;  // case-2 permutations' communicators
};

template <class Impl, class Public>
Impl& impl_of(Public* object, HandleKind kind, const char* what) {
  if (object == nullptr || !Runtime::get().is_live(kind, object)) {
    throw Misuse(std::string(what) + " is NULL or was deleted");
  }
  return *static_cast<Impl*>(object);
}

}  // namespace nodecomm::mlsl
