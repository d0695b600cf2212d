#include "collectives.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace nodecomm::bench {

std::string_view collective_name(Collective collective) {
  switch (collective) {
    case Collective::kAllreduce:
      return "allreduce";
    case Collective::kReduce:
      return "reduce";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllgather:
      return "allgather";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kAlltoall:
      return "alltoall";
    case Collective::kBarrier:
      return "barrier";
    case Collective::kAllgatherv:
      return "allgatherv";
    case Collective::kAlltoallv:
      return "alltoallv";
  }
  return "?";
}

std::optional<Collective> parse_collective(std::string_view name) {
  for (Collective c : kBenchCollectives) {
    if (collective_name(c) == name) return c;
  }
  return std::nullopt;
}

std::string collective_names() {
  std::string out;
  for (Collective c : kBenchCollectives) {
    if (!out.empty()) out += ' ';
    out += collective_name(c);
  }
  return out;
}

bool is_reducing(Collective collective) {
  return collective == Collective::kAllreduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

bool has_root(Collective collective) {
  return collective == Collective::kReduce || collective == Collective::kBroadcast ||
         collective == Collective::kGather || collective == Collective::kScatter;
}

bool has_buffers(Collective collective) {
  return collective != Collective::kBarrier;
}

bool supports_inplace(Collective collective) {
  return collective != Collective::kAlltoall && collective != Collective::kBarrier &&
         !is_vector(collective);
}

bool is_vector(Collective collective) {
  return collective == Collective::kAllgatherv || collective == Collective::kAlltoallv;
}

size_t vector_count(Collective collective, size_t count, int src, int dst) {
  const int step = collective == Collective::kAlltoallv ? (src + dst) % 3 : src % 3;
  return step == 0 ? (count > 0 ? count - 1 : 0) : count + static_cast<size_t>(step - 1);
}

namespace {
// The send and receive displacements of a vector collective (CollectiveCase's layout), as
// n x n tables: send[s * n + d], recv[d * n + s]. Also the buffer sizes and moved elements
// into `shape`, when not null.
void vector_layout(Collective collective, size_t count, size_t n, std::vector<size_t>* send,
                   std::vector<size_t>* recv, Shape* shape) {
  send->assign(n * n, 0);
  recv->assign(n * n, 0);
  std::vector<size_t> sent(n, 0), received(n, 0);  // data elements per rank
  for (size_t s = 0; s < n; ++s) {
    for (size_t d = 0; d < n; ++d) {
      const size_t k = vector_count(collective, count, static_cast<int>(s), static_cast<int>(d));
      // allgatherv sends the same run to everyone; alltoallv packs its runs in rank order.
      if (collective == Collective::kAlltoallv) {
        (*send)[s * n + d] = sent[s];
        sent[s] += k;
      } else {
        sent[s] = k;
      }
      // Runs arrive in source order (s is the outer loop), each followed by its gap.
      (*recv)[d * n + s] = received[d] + s;
      received[d] += k;
    }
  }
  if (shape == nullptr) return;
  for (size_t r = 0; r < n; ++r) {
    shape->send_elems = std::max(shape->send_elems, sent[r]);
    shape->recv_elems = std::max(shape->recv_elems, received[r] + n);
    shape->moved_elems = std::max({shape->moved_elems, sent[r], received[r]});
  }
}
}  // namespace

Shape shape_of(Collective collective, size_t count, int world_size) {
  const size_t n = static_cast<size_t>(std::max(world_size, 1));
  Shape s;
  s.count = count;
  switch (collective) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kBroadcast:
      s.send_elems = s.recv_elems = count;
      break;
    case Collective::kReduceScatter:
      s.send_elems = count * n;
      s.recv_elems = count;
      s.recv_step = count;
      break;
    case Collective::kAllgather:
    case Collective::kGather:
      s.send_elems = count;
      s.recv_elems = count * n;
      s.send_step = count;
      break;
    case Collective::kScatter:
      s.send_elems = count * n;
      s.recv_elems = count;
      s.recv_step = count;
      break;
    case Collective::kAlltoall:
      s.send_elems = s.recv_elems = count * n;
      break;
    case Collective::kAllgatherv:
    case Collective::kAlltoallv: {
      std::vector<size_t> send, recv;
      vector_layout(collective, count, n, &send, &recv, &s);
      break;
    }
    case Collective::kBarrier:
      s.count = 0;
      break;
  }
  if (!is_vector(collective)) s.moved_elems = std::max(s.send_elems, s.recv_elems);
  s.inplace_elems = supports_inplace(collective) ? std::max(s.send_elems, s.recv_elems) : 0;
  return s;
}

Shape shape_for_bytes(Collective collective, size_t bytes, size_t element, int world_size) {
  if (collective == Collective::kBarrier) return shape_of(collective, 0, world_size);
  const size_t total = std::max<size_t>(1, bytes / std::max<size_t>(element, 1));
  switch (collective) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kBroadcast:
      return shape_of(collective, total, world_size);
    default:
      // The count argument is per rank (block); nccl-tests rounds the total down to a multiple
      // of the ranks. At least one element, so that tiny sizes still run something.
      return shape_of(collective,
                      std::max<size_t>(1, total / static_cast<size_t>(std::max(world_size, 1))),
                      world_size);
  }
}

size_t reported_bytes(const Shape& shape, size_t element) {
  return shape.moved_elems * element;
}

double busbw_factor(Collective collective, int world_size) {
  const double n = world_size;
  switch (collective) {
    case Collective::kAllreduce:
      return 2 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter:
    case Collective::kAllgatherv:
    case Collective::kAlltoallv:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return 1;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

namespace {
Pattern pattern_for(Collective collective, nc_dtype_t dtype, nc_redop_t op, int world_size) {
  return is_reducing(collective) ? Pattern(dtype, op, world_size)
                                 : Pattern::for_copy(dtype, world_size);
}
}  // namespace

CollectiveCase::CollectiveCase(Collective collective, nc_dtype_t dtype, nc_redop_t op,
                               int world_size, int root, size_t count)
    : collective_(collective),
      dtype_(dtype),
      op_(op),
      world_size_(std::max(world_size, 1)),
      root_(has_root(collective) ? root : 0),
      element_(dtype_bytes(dtype)),
      shape_(shape_of(collective, count, world_size_)),
      pattern_(pattern_for(collective, dtype, op, world_size_)) {
  if (element_ == 0) {
    throw std::invalid_argument(fmt::format("unknown dtype {}", static_cast<int>(dtype)));
  }
  if (has_root(collective) && (root < 0 || root >= world_size_)) {
    throw std::invalid_argument(fmt::format("root {} of {} is not a rank in [0, {})", root,
                                            collective_name(collective), world_size_));
  }
  if (is_vector(collective)) {
    vector_layout(collective, count, static_cast<size_t>(world_size_), &send_displs_, &recv_displs_,
                  nullptr);
  }
}

CollectiveCase::VectorArgs CollectiveCase::vector_args(int rank) const {
  VectorArgs a;
  if (!is_vector(collective_)) return a;
  const size_t n = static_cast<size_t>(world_size_);
  const size_t r = static_cast<size_t>(rank);
  for (size_t p = 0; p < n; ++p) {
    const int peer = static_cast<int>(p);
    a.send_counts.push_back(vector_count(collective_, shape_.count, rank, peer));
    a.send_displs.push_back(send_displs_[r * n + p]);
    a.recv_counts.push_back(vector_count(collective_, shape_.count, peer, rank));
    a.recv_displs.push_back(recv_displs_[r * n + p]);
  }
  a.send_count = a.send_counts.empty() ? 0 : a.send_counts[0];
  return a;
}

// Element j of rank d's receive buffer: inside the run from rank s (the last run starting at
// or before j), a gap, or the unused tail.
CollectiveCase::Want CollectiveCase::want_recv_vector(int rank, size_t j) const {
  const size_t n = static_cast<size_t>(world_size_);
  const size_t d = static_cast<size_t>(rank);
  const auto row = recv_displs_.begin() + static_cast<std::ptrdiff_t>(d * n);
  const auto next = std::upper_bound(row, row + static_cast<std::ptrdiff_t>(n), j);
  if (next == row) return {Want::kPoison};
  const size_t s = static_cast<size_t>(next - row) - 1;
  const size_t offset = j - row[static_cast<std::ptrdiff_t>(s)];
  if (offset >= vector_count(collective_, shape_.count, static_cast<int>(s), rank)) {
    return {Want::kPoison};
  }
  return {Want::kInput, static_cast<int>(s), send_displs_[s * n + d] + offset};
}

bool CollectiveCase::defined() const {
  return !is_reducing(collective_) || reference_defined(dtype_, op_);
}

CallBuffers CollectiveCase::inplace_buffers(void* buffer, int rank) const {
  char* base = static_cast<char*>(buffer);
  const size_t r = static_cast<size_t>(rank);
  return {base + r * shape_.send_step * element_, base + r * shape_.recv_step * element_};
}

CollectiveCase::Want CollectiveCase::want_send(int rank, size_t j) const {
  return {Want::kInput, rank, j};
}

// Who receives what, out of place. c is the count argument, so blocks are c elements long.
CollectiveCase::Want CollectiveCase::want_recv(int rank, size_t j) const {
  const size_t c = shape_.count;
  const size_t r = static_cast<size_t>(rank);
  switch (collective_) {
    case Collective::kAllreduce:
      return {Want::kReduced, 0, j};
    case Collective::kReduce:
      return rank == root_ ? Want{Want::kReduced, 0, j} : Want{Want::kPoison};
    case Collective::kBroadcast:
      return {Want::kInput, root_, j};
    case Collective::kReduceScatter:
      return {Want::kReduced, 0, r * c + j};
    case Collective::kAllgather:
      return {Want::kInput, static_cast<int>(j / c), j % c};
    case Collective::kGather:
      return rank == root_ ? Want{Want::kInput, static_cast<int>(j / c), j % c}
                           : Want{Want::kPoison};
    case Collective::kScatter:
      return {Want::kInput, root_, r * c + j};
    case Collective::kAlltoall:
      // Block i of my receive buffer is block r of rank i's send buffer.
      return {Want::kInput, static_cast<int>(j / c), r * c + j % c};
    case Collective::kAllgatherv:
    case Collective::kAlltoallv:
      return want_recv_vector(rank, j);
    case Collective::kBarrier:
      break;
  }
  return {Want::kPoison};
}

// In place, before the run: the input where the rank sends from, poison elsewhere.
CollectiveCase::Want CollectiveCase::want_inplace_before(int rank, size_t k) const {
  const size_t c = shape_.count;
  const size_t r = static_cast<size_t>(rank);
  switch (collective_) {
    case Collective::kAllreduce:
    case Collective::kReduce:
    case Collective::kReduceScatter:
      return {Want::kInput, rank, k};
    case Collective::kBroadcast:
    case Collective::kScatter:
      // Only the root's buffer is sent; a non-root's receives (and, for scatter, is otherwise
      // unused).
      return rank == root_ ? Want{Want::kInput, rank, k} : Want{Want::kPoison};
    case Collective::kAllgather:
    case Collective::kGather:
      return k / c == r ? Want{Want::kInput, rank, k % c} : Want{Want::kPoison};
    case Collective::kAlltoall:
    case Collective::kAllgatherv:
    case Collective::kAlltoallv:
    case Collective::kBarrier:
      break;
  }
  return {Want::kPoison};
}

// In place, after the run: what the rank received where it receives, the unchanged contents
// elsewhere.
CollectiveCase::Want CollectiveCase::want_inplace_after(int rank, size_t k) const {
  const size_t c = shape_.count;
  const size_t r = static_cast<size_t>(rank);
  switch (collective_) {
    case Collective::kAllreduce:
      return {Want::kReduced, 0, k};
    case Collective::kReduce:
      return rank == root_ ? Want{Want::kReduced, 0, k} : want_inplace_before(rank, k);
    case Collective::kBroadcast:
      return {Want::kInput, root_, k};
    case Collective::kReduceScatter:
      return k / c == r ? Want{Want::kReduced, 0, k} : want_inplace_before(rank, k);
    case Collective::kAllgather:
      return {Want::kInput, static_cast<int>(k / c), k % c};
    case Collective::kGather:
      return rank == root_ ? Want{Want::kInput, static_cast<int>(k / c), k % c}
                           : want_inplace_before(rank, k);
    case Collective::kScatter:
      // The root keeps its buffer; rank r receives block r of it at the same offset.
      return rank == root_ || k / c == r ? Want{Want::kInput, root_, k}
                                         : want_inplace_before(rank, k);
    case Collective::kAlltoall:
    case Collective::kAllgatherv:
    case Collective::kAlltoallv:
    case Collective::kBarrier:
      break;
  }
  return {Want::kPoison};
}

void CollectiveCase::write(const Want& want, void* out) const {
  switch (want.kind) {
    case Want::kInput:
      pattern_.input(want.rank, want.index, out);
      break;
    case Want::kReduced:
      pattern_.expected(want.index, out);
      break;
    case Want::kPoison:
      poison(out, element_);
      break;
  }
}

void CollectiveCase::prepare(int rank, void* send, void* recv) const {
  if (send != nullptr) pattern_.fill(rank, send, shape_.send_elems);
  if (recv != nullptr) poison(recv, shape_.recv_elems * element_);
}

void CollectiveCase::prepare_inplace(int rank, void* buffer) const {
  char* out = static_cast<char*>(buffer);
  for (size_t k = 0; k < shape_.inplace_elems; ++k) {
    write(want_inplace_before(rank, k), out + k * element_);
  }
}

uint64_t CollectiveCase::compare(const char* buffer_name, const void* data, size_t elems,
                                 Want (CollectiveCase::*want_of)(int, size_t) const, int rank,
                                 std::vector<Mismatch>* recorded, size_t record_limit) const {
  if (!defined()) {
    throw std::invalid_argument(fmt::format("no reference for redop {} on dtype {}",
                                            nc_redop_name(op_) ? nc_redop_name(op_) : "?",
                                            nc_dtype_name(dtype_) ? nc_dtype_name(dtype_) : "?"));
  }
  const char* got = static_cast<const char*>(data);
  unsigned char want[8];
  uint64_t wrong = 0;
  for (size_t i = 0; i < elems; ++i) {
    const Want w = (this->*want_of)(rank, i);
    write(w, want);
    const char* g = got + i * element_;
    // Poison must survive byte for byte: a float rewritten with an equal value was still
    // written, which is exactly what "untouched" rules out.
    const bool same = w.kind == Want::kPoison ? std::memcmp(g, want, element_) == 0
                                              : same_element(dtype_, g, want);
    if (same) continue;
    if (recorded != nullptr && recorded->size() < record_limit) {
      std::string expected = format_element(dtype_, want);
      if (w.kind == Want::kPoison) {
        expected += " (poison: untouched)";
      } else if (w.kind == Want::kInput) {
        expected += fmt::format(" (rank {}'s input [{}])", w.rank, w.index);
      } else {
        expected += fmt::format(" (reduction of [{}])", w.index);
      }
      recorded->push_back({i, format_element(dtype_, g), std::move(expected), buffer_name});
    }
    ++wrong;
  }
  return wrong;
}

uint64_t CollectiveCase::verify(int rank, const void* send, const void* recv,
                                std::vector<Mismatch>* recorded, size_t max_recorded) const {
  const size_t limit = recorded != nullptr ? recorded->size() + max_recorded : 0;
  uint64_t wrong = 0;
  if (recv != nullptr) {
    wrong +=
        compare("recv", recv, shape_.recv_elems, &CollectiveCase::want_recv, rank, recorded, limit);
  }
  if (send != nullptr) {
    wrong +=
        compare("send", send, shape_.send_elems, &CollectiveCase::want_send, rank, recorded, limit);
  }
  return wrong;
}

uint64_t CollectiveCase::verify_inplace(int rank, const void* buffer,
                                        std::vector<Mismatch>* recorded,
                                        size_t max_recorded) const {
  return compare("buffer", buffer, shape_.inplace_elems, &CollectiveCase::want_inplace_after, rank,
                 recorded, recorded != nullptr ? recorded->size() + max_recorded : 0);
}

}  // namespace nodecomm::bench
