// Point-to-point messaging over MPI (part of the MPI transport): every group's requests in one
// table, advanced together, and one PointToPoint per node group over the group's lanes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpi/mpi_common.hpp"
#include "net/p2p.hpp"

namespace nodecomm::daemon {

// Outstanding point-to-point requests of every group, advanced together by one
// MPI_Testsome per poll: one trip through Open MPI's progress engine, however many slices
// are in flight.
class RequestTable {
 public:
  explicit RequestTable(uint32_t node) : node_(node) {}
  ~RequestTable();
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  P2pRequest add(MPI_Request request);
  void poll();
  bool done(P2pRequest id);
  size_t outstanding() const { return active_.size(); }
  uint64_t completions() const { return completions_; }

 private:
  uint32_t node_;
  P2pRequest next_ = 1;
  std::vector<MPI_Request> active_;
  std::vector<P2pRequest> ids_;
  std::vector<int> indices_;
  std::vector<P2pRequest> finished_;
  uint64_t completions_ = 0;
};

// Point-to-point over one node group: lane i is the group's i-th duplicated communicator.
class MpiPointToPoint final : public PointToPoint {
 public:
  MpiPointToPoint(RequestTable& table, std::vector<MPI_Comm> lanes, int max_tag, uint32_t node);
  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  uint32_t lanes() const override { return static_cast<uint32_t>(lanes_.size()); }
  int max_tag() const override { return max_tag_; }
  P2pRequest isend(uint32_t lane, uint32_t peer, int tag, const void* data, size_t bytes) override;
  P2pRequest irecv(uint32_t lane, uint32_t peer, int tag, void* data, size_t bytes) override;
  // The table is shared: this advances every group's requests.
  void poll() override { table_.poll(); }
  bool done(P2pRequest request) override { return table_.done(request); }
  const std::vector<MPI_Comm>& lane_comms() const { return lanes_; }

 private:
  RequestTable& table_;
  std::vector<MPI_Comm> lanes_;
  int max_tag_;
  uint32_t node_;
  uint32_t rank_ = 0;
  uint32_t size_ = 1;
};

}  // namespace nodecomm::daemon
