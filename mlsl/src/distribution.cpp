// Distribution: MLSL's data x model groups as two nodecomm communicators, and its ten
// collectives with MLSL's (MPI's) in-place conventions mapped onto nodecomm's (NCCL's).
#include <cstring>

#include "impl.hpp"

namespace nodecomm::mlsl {

namespace {

int distribution_next_id = 1;

const char* distribution_group_name(GroupType group) {
  switch (group) {
    case GT_DATA:
      return "GT_DATA";
    case GT_MODEL:
      return "GT_MODEL";
    case GT_GLOBAL:
      return "GT_GLOBAL";
  }
  return "GroupType(?)";
}

bool distribution_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto* x = static_cast<const char*>(a);
  const auto* y = static_cast<const char*>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

}  // namespace

DistributionImpl::DistributionImpl(int id, nc_comm_t data, nc_comm_t model)
    : id_(id), data_(data), model_(model) {
  nc_context_t* ctx = Runtime::get().ctx();
  nc_comm_rank(ctx, data_, &data_index_);
  nc_comm_size(ctx, data_, &data_size_);
  nc_comm_rank(ctx, model_, &model_index_);
  nc_comm_size(ctx, model_, &model_size_);
  Runtime::get().add_live(HandleKind::distribution, this);
}

DistributionImpl::~DistributionImpl() {
  Runtime::get().remove_live(HandleKind::distribution, this);
}

nc_comm_t DistributionImpl::comm(GroupType group) const {
  switch (group) {
    case GT_DATA:
      return data_;
    case GT_MODEL:
      return model_;
    case GT_GLOBAL:
      return Runtime::get().global();
  }
  throw Misuse("unknown GroupType " + std::to_string(static_cast<int>(group)));
}

int DistributionImpl::index(GroupType group) const {
  switch (group) {
    case GT_DATA:
      return data_index_;
    case GT_MODEL:
      return model_index_;
    case GT_GLOBAL:
      return Runtime::get().rank();
  }
  throw Misuse("unknown GroupType " + std::to_string(static_cast<int>(group)));
}

int DistributionImpl::count(GroupType group) const {
  switch (group) {
    case GT_DATA:
      return data_size_;
    case GT_MODEL:
      return model_size_;
    case GT_GLOBAL:
      return Runtime::get().size();
  }
  throw Misuse("unknown GroupType " + std::to_string(static_cast<int>(group)));
}

std::string DistributionImpl::describe() const {
  return "distribution " + std::to_string(id_) + " (" + std::to_string(data_size_) + " data x " +
         std::to_string(model_size_) + " model)";
}

void DistributionImpl::free_comms() {
  Runtime& rt = Runtime::get();
  if (!rt.initialized()) return;
  rt.engine().finish_owned_by(this);
  // Model first, as they were made: comm_free is collective and every rank frees in this order.
  check_nc(nc_comm_free(rt.ctx(), &model_), describe() + ": releasing the model group");
  check_nc(nc_comm_free(rt.ctx(), &data_), describe() + ": releasing the data group");
}

void DistributionImpl::release() {
  if (--users_ == 0 && deleted_) {
    free_comms();
    delete this;
  }
}

void DistributionImpl::mark_deleted() {
  Runtime::get().engine().finish_owned_by(this);
  Runtime::get().remove_live(HandleKind::distribution, this);
  deleted_ = true;
  if (users_ == 0) {
    free_comms();
    delete this;
  }
}

std::unique_ptr<Exchange> DistributionImpl::exchange(const char* call, GroupType group,
                                                     size_t bytes) {
  Runtime& rt = Runtime::get();
  rt.require_init(call);
  auto x = std::make_unique<Exchange>(describe() + ": " + call + " on " +
                                      distribution_group_name(group));
  x->set_owner(this);
  x->set_attr(rt.priority_for(bytes), "mlsl.dist" + std::to_string(id_) + "." + call);
  return x;
}

CommReq* DistributionImpl::post(std::unique_ptr<Exchange> x) {
  Runtime::get().engine().start(*x);
  return Runtime::get().engine().issue(std::move(x));
}

}  // namespace nodecomm::mlsl

namespace MLSL {

using nodecomm::mlsl::distribution_next_id;
using nodecomm::mlsl::distribution_overlap;
using nodecomm::mlsl::DistributionImpl;
using nodecomm::mlsl::entry;
using nodecomm::mlsl::HandleKind;
using nodecomm::mlsl::impl_of;
using nodecomm::mlsl::Misuse;
using nodecomm::mlsl::require;
using nodecomm::mlsl::Runtime;
using nodecomm::mlsl::size_of;
using nodecomm::mlsl::to_nc;

namespace {

DistributionImpl& distribution_self(Distribution* d, const char* call) {
  return impl_of<DistributionImpl>(d, HandleKind::distribution, call);
}

// Common checks of a collective's arguments; returns the group's size.
int distribution_check(DistributionImpl& d, const char* call, DataType type, GroupType group) {
  Runtime::get().require_init(call);
  size_of(type);  // throws for an unknown DataType
  return d.count(group);
}

void distribution_check_root(size_t root, int n, const char* call) {
  if (root >= static_cast<size_t>(n)) {
    throw Misuse(std::string(call) + ": root " + std::to_string(root) +
                 " is not an index of a group of " + std::to_string(n));
  }
}

}  // namespace

Distribution* Environment::CreateDistribution(size_t dataPartitions, size_t modelPartitions) {
  return entry("Environment::CreateDistribution", [&]() -> Distribution* {
    Runtime& rt = Runtime::get();
    rt.require_init("Environment::CreateDistribution");
    if (dataPartitions > 1u << 30 || modelPartitions > 1u << 30) {
      throw Misuse("part counts " + std::to_string(dataPartitions) + " x " +
                   std::to_string(modelPartitions) + " are too large");
    }
    const auto layout = nodecomm::mlsl::grid_layout(
        rt.rank(), rt.size(), static_cast<int>(dataPartitions), static_cast<int>(modelPartitions));
    nc_comm_t model = NC_COMM_NULL;
    nc_comm_t data = NC_COMM_NULL;
    nodecomm::mlsl::check_nc(
        nc_comm_split(rt.ctx(), rt.global(), layout.model_color, rt.rank(), &model),
        "CreateDistribution: the model group");
    nodecomm::mlsl::check_nc(
        nc_comm_split(rt.ctx(), rt.global(), layout.data_color, rt.rank(), &data),
        "CreateDistribution: the data group");
    return new DistributionImpl(distribution_next_id++, data, model);
  });
}

Distribution* Environment::CreateDistributionWithColors(int dataColor, int modelColor) {
  return entry("Environment::CreateDistributionWithColors", [&]() -> Distribution* {
    Runtime& rt = Runtime::get();
    rt.require_init("Environment::CreateDistributionWithColors");
    if (dataColor < 0 || modelColor < 0) {
      throw Misuse("colors must be non-negative, got data " + std::to_string(dataColor) +
                   ", model " + std::to_string(modelColor));
    }
    nc_comm_t model = NC_COMM_NULL;
    nc_comm_t data = NC_COMM_NULL;
    nodecomm::mlsl::check_nc(nc_comm_split(rt.ctx(), rt.global(), modelColor, rt.rank(), &model),
                             "CreateDistributionWithColors: the model group");
    nodecomm::mlsl::check_nc(nc_comm_split(rt.ctx(), rt.global(), dataColor, rt.rank(), &data),
                             "CreateDistributionWithColors: the data group");
    return new DistributionImpl(distribution_next_id++, data, model);
  });
}

void Environment::DeleteDistribution(Distribution* distribution) {
  entry("Environment::DeleteDistribution", [&] {
    Runtime::get().require_init("Environment::DeleteDistribution");
    distribution_self(distribution, "DeleteDistribution: the distribution").mark_deleted();
  });
}

size_t Distribution::GetProcessIdx(GroupType groupType) {
  return entry("Distribution::GetProcessIdx", [&] {
    return static_cast<size_t>(distribution_self(this, "Distribution").index(groupType));
  });
}

size_t Distribution::GetProcessCount(GroupType groupType) {
  return entry("Distribution::GetProcessCount", [&] {
    return static_cast<size_t>(distribution_self(this, "Distribution").count(groupType));
  });
}

CommReq* Distribution::Bcast(void* buffer, size_t count, DataType dataType, size_t rootIdx,
                             GroupType groupType) {
  return entry("Distribution::Bcast", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "Bcast", dataType, groupType);
    distribution_check_root(rootIdx, n, "Bcast");
    auto x = d.exchange("Bcast", groupType, count * size_of(dataType));
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_broadcast(Runtime::get().ctx(), buffer, buffer, count, to_nc(dataType),
                          static_cast<int>(rootIdx), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::Reduce(void* sendBuffer, void* recvBuffer, size_t count, DataType dataType,
                              ReductionType redType, size_t rootIdx, GroupType groupType) {
  return entry("Distribution::Reduce", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "Reduce", dataType, groupType);
    distribution_check_root(rootIdx, n, "Reduce");
    const nc_redop_t op = to_nc(redType);
    // Non-roots' recvBuffer is not theirs to write: nodecomm ignores it there.
    void* recv = d.index(groupType) == static_cast<int>(rootIdx) ? recvBuffer : nullptr;
    auto x = d.exchange("Reduce", groupType, count * size_of(dataType));
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_reduce(Runtime::get().ctx(), sendBuffer, recv, count, to_nc(dataType), op,
                       static_cast<int>(rootIdx), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::AllReduce(void* sendBuffer, void* recvBuffer, size_t count,
                                 DataType dataType, ReductionType redType, GroupType groupType) {
  return entry("Distribution::AllReduce", [&] {
    auto& d = distribution_self(this, "Distribution");
    distribution_check(d, "AllReduce", dataType, groupType);
    const nc_redop_t op = to_nc(redType);
    auto x = d.exchange("AllReduce", groupType, count * size_of(dataType));
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_allreduce(Runtime::get().ctx(), sendBuffer, recvBuffer, count, to_nc(dataType), op,
                          comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::AlltoAll(void* sendBuffer, size_t sendCount, void* recvBuffer,
                                DataType dataType, GroupType groupType) {
  return entry("Distribution::AlltoAll", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "AlltoAll", dataType, groupType);
    const size_t bytes = sendCount * n * size_of(dataType);
    auto x = d.exchange("AlltoAll", groupType, bytes);
    const void* send = sendBuffer;
    // nodecomm's alltoall never runs in place; MPI's (and so MLSL's) may.
    if (bytes != 0 && distribution_overlap(sendBuffer, bytes, recvBuffer, bytes)) {
      void* copy = x->scratch(bytes);
      std::memcpy(copy, sendBuffer, bytes);
      send = copy;
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_alltoall(Runtime::get().ctx(), send, recvBuffer, sendCount, to_nc(dataType), comm,
                         a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::AlltoAllv(void* sendBuffer, size_t* sendCounts, size_t* sendOffsets,
                                 void* recvBuffer, size_t* recvCounts, size_t* recvOffsets,
                                 DataType dataType, GroupType groupType) {
  return entry("Distribution::AlltoAllv", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "AlltoAllv", dataType, groupType);
    require(recvCounts != nullptr && recvOffsets != nullptr &&
                (sendBuffer == recvBuffer || (sendCounts != nullptr && sendOffsets != nullptr)),
            "AlltoAllv: counts and offsets must not be NULL");
    const size_t elem = size_of(dataType);
    std::vector<size_t> rc(recvCounts, recvCounts + n);
    std::vector<size_t> ro(recvOffsets, recvOffsets + n);
    size_t recv_extent = 0;
    size_t recv_total = 0;
    for (int i = 0; i < n; ++i) {
      recv_extent = std::max(recv_extent, ro[i] + rc[i]);
      recv_total += rc[i];
    }
    auto x = d.exchange("AlltoAllv", groupType, recv_total * elem);
    std::vector<size_t> sc;
    std::vector<size_t> so;
    const void* send = sendBuffer;
    if (sendBuffer == recvBuffer) {
      // MPI_IN_PLACE: what goes to member i is in the buffer at recvOffsets[i], recvCounts[i].
      sc = rc;
      so = ro;
      if (recv_extent != 0) {
        void* copy = x->scratch(recv_extent * elem);
        std::memcpy(copy, sendBuffer, recv_extent * elem);
        send = copy;
      }
    } else {
      sc.assign(sendCounts, sendCounts + n);
      so.assign(sendOffsets, sendOffsets + n);
      size_t send_extent = 0;
      for (int i = 0; i < n; ++i) send_extent = std::max(send_extent, so[i] + sc[i]);
      if (send_extent != 0 && recv_extent != 0 &&
          distribution_overlap(sendBuffer, send_extent * elem, recvBuffer, recv_extent * elem)) {
        void* copy = x->scratch(send_extent * elem);
        std::memcpy(copy, sendBuffer, send_extent * elem);
        send = copy;
      }
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_alltoallv(Runtime::get().ctx(), send, sc.data(), so.data(), recvBuffer, rc.data(),
                          ro.data(), to_nc(dataType), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::Gather(void* sendBuffer, size_t sendCount, void* recvBuffer,
                              DataType dataType, size_t rootIdx, GroupType groupType) {
  return entry("Distribution::Gather", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "Gather", dataType, groupType);
    distribution_check_root(rootIdx, n, "Gather");
    const size_t elem = size_of(dataType);
    const size_t block = sendCount * elem;
    const bool root = d.index(groupType) == static_cast<int>(rootIdx);
    auto x = d.exchange("Gather", groupType, block * n);
    const void* send = sendBuffer;
    void* recv = root ? recvBuffer : nullptr;
    if (root && block != 0) {
      char* own = static_cast<char*>(recvBuffer) + rootIdx * block;
      if (sendBuffer == recvBuffer) {
        send = own;  // MPI_IN_PLACE at the root: its block is already in place
      } else if (sendBuffer != own &&
                 distribution_overlap(sendBuffer, block, recvBuffer, block * n)) {
        void* copy = x->scratch(block);
        std::memcpy(copy, sendBuffer, block);
        send = copy;
      }
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_gather(Runtime::get().ctx(), send, recv, sendCount, to_nc(dataType),
                       static_cast<int>(rootIdx), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::AllGather(void* sendBuffer, size_t sendCount, void* recvBuffer,
                                 DataType dataType, GroupType groupType) {
  return entry("Distribution::AllGather", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "AllGather", dataType, groupType);
    const size_t block = sendCount * size_of(dataType);
    auto x = d.exchange("AllGather", groupType, block * n);
    char* own = static_cast<char*>(recvBuffer) + d.index(groupType) * block;
    const void* send = sendBuffer;
    if (sendBuffer == recvBuffer) {
      send = own;  // MPI_IN_PLACE: this member's block is already at its place in recv
    } else if (block != 0 && sendBuffer != own &&
               distribution_overlap(sendBuffer, block, recvBuffer, block * n)) {
      void* copy = x->scratch(block);
      std::memcpy(copy, sendBuffer, block);
      send = copy;
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_allgather(Runtime::get().ctx(), send, recvBuffer, sendCount, to_nc(dataType), comm,
                          a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::AllGatherv(void* sendBuffer, size_t sendCount, void* recvBuffer,
                                  size_t* recvCounts, DataType dataType, GroupType groupType) {
  return entry("Distribution::AllGatherv", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "AllGatherv", dataType, groupType);
    require(recvCounts != nullptr, "AllGatherv: recvCounts is NULL");
    const size_t elem = size_of(dataType);
    std::vector<size_t> counts(recvCounts, recvCounts + n);
    std::vector<size_t> displs(n, 0);
    size_t total = 0;
    for (int i = 0; i < n; ++i) {
      displs[i] = total;
      total += counts[i];
    }
    const int me = d.index(groupType);
    if (sendCount != counts[me]) {
      throw Misuse("AllGatherv: sendCount " + std::to_string(sendCount) +
                   " differs from recvCounts[" + std::to_string(me) +
                   "] = " + std::to_string(counts[me]));
    }
    auto x = d.exchange("AllGatherv", groupType, total * elem);
    const void* send = sendBuffer;
    const size_t bytes = sendCount * elem;
    const bool in_place = sendBuffer == recvBuffer;
    if (bytes != 0 &&
        (in_place || distribution_overlap(sendBuffer, bytes, recvBuffer, total * elem))) {
      // nodecomm's allgatherv is never in place: stage this member's block.
      const char* from = static_cast<const char*>(sendBuffer) + (in_place ? displs[me] * elem : 0);
      void* copy = x->scratch(bytes);
      std::memcpy(copy, from, bytes);
      send = copy;
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_allgatherv(Runtime::get().ctx(), send, sendCount, recvBuffer, counts.data(),
                           displs.data(), to_nc(dataType), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::Scatter(void* sendBuffer, void* recvBuffer, size_t recvCount,
                               DataType dataType, size_t rootIdx, GroupType groupType) {
  return entry("Distribution::Scatter", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "Scatter", dataType, groupType);
    distribution_check_root(rootIdx, n, "Scatter");
    const size_t block = recvCount * size_of(dataType);
    const bool root = d.index(groupType) == static_cast<int>(rootIdx);
    auto x = d.exchange("Scatter", groupType, block * n);
    const void* send = root ? sendBuffer : nullptr;
    void* recv = recvBuffer;
    if (root && block != 0) {
      char* own = static_cast<char*>(sendBuffer) + rootIdx * block;
      if (recvBuffer == sendBuffer) {
        recv = own;  // MPI_IN_PLACE at the root: its block stays where it is
      } else if (recvBuffer != own &&
                 distribution_overlap(recvBuffer, block, sendBuffer, block * n)) {
        void* copy = x->scratch(block * n);
        std::memcpy(copy, sendBuffer, block * n);
        send = copy;
      }
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_scatter(Runtime::get().ctx(), send, recv, recvCount, to_nc(dataType),
                        static_cast<int>(rootIdx), comm, a, r);
    });
    return d.post(std::move(x));
  });
}

CommReq* Distribution::ReduceScatter(void* sendBuffer, void* recvBuffer, size_t recvCount,
                                     DataType dataType, ReductionType redType,
                                     GroupType groupType) {
  return entry("Distribution::ReduceScatter", [&] {
    auto& d = distribution_self(this, "Distribution");
    const int n = distribution_check(d, "ReduceScatter", dataType, groupType);
    const nc_redop_t op = to_nc(redType);
    const size_t block = recvCount * size_of(dataType);
    auto x = d.exchange("ReduceScatter", groupType, block * n);
    const void* send = sendBuffer;
    void* recv = recvBuffer;
    const int me = d.index(groupType);
    if (sendBuffer == recvBuffer) {
      // MPI leaves an in-place result at the start of the buffer, nodecomm at the member's own
      // block: post nodecomm's form and move the block down once it is complete.
      char* base = static_cast<char*>(sendBuffer);
      recv = base + me * block;
      if (me != 0 && block != 0) {
        x->on_done([base, me, block] { std::memmove(base, base + me * block, block); });
      }
    } else if (block != 0 && distribution_overlap(sendBuffer, block * n, recvBuffer, block) &&
               recvBuffer != static_cast<char*>(sendBuffer) + me * block) {
      void* copy = x->scratch(block * n);
      std::memcpy(copy, sendBuffer, block * n);
      send = copy;
    }
    x->add_step([=, comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_reduce_scatter(Runtime::get().ctx(), send, recv, recvCount, to_nc(dataType), op,
                               comm, a, r);
    });
    return d.post(std::move(x));
  });
}

void Distribution::Barrier(GroupType groupType) {
  entry("Distribution::Barrier", [&] {
    auto& d = distribution_self(this, "Distribution");
    Runtime::get().require_init("Barrier");
    auto x = d.exchange("Barrier", groupType, 0);
    x->add_step([comm = d.comm(groupType)](const nc_op_attr_t* a, nc_request_t* r) {
      return nc_barrier(Runtime::get().ctx(), comm, a, r);
    });
    Runtime::get().engine().start(*x);
    Runtime::get().engine().wait(*x);
  });
}

}  // namespace MLSL
