// Pure arithmetic of the torch backend: how an operation is cut into pieces and how torch's
// split sizes become nodecomm's counts and displacements. No torch and no daemon here, so the
// rules are easy to read and every rank computes the same answer from the same arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nodecomm::torch_backend {

// [begin, end) element ranges of at most `piece_elems` elements, nearly equal in size. The
// plan depends only on (count, piece_elems), never on where the buffer lives, so every rank
// posts the same operations (a rank whose buffer is zero-copy and one whose buffer is copied
// through the arena must still agree on the sequence).
inline std::vector<std::pair<size_t, size_t>> pieces(size_t count, size_t piece_elems) {
  if (count == 0 || piece_elems == 0 || count <= piece_elems) return {{0, count}};
  const size_t n = (count + piece_elems - 1) / piece_elems;
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.emplace_back(count * i / n, count * (i + 1) / n);
  return out;
}

// Exclusive prefix sums: displacements of consecutive blocks of the given sizes.
inline std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displs(counts.size());
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = at;
    at += counts[i];
  }
  return displs;
}

// torch's all_to_all_single split sizes (rows of dim 0; empty = equal rows per rank) as
// element counts per rank. `rows` is the tensor's size(0), `row_elems` its elements per row.
inline std::vector<size_t> split_counts(const std::vector<int64_t>& splits, int size, int64_t rows,
                                        size_t row_elems, const char* what) {
  std::vector<size_t> counts(static_cast<size_t>(size));
  if (splits.empty()) {
    if (rows % size != 0) {
      throw std::invalid_argument(std::string("nodecomm: ") + what + " has " +
                                  std::to_string(rows) + " rows, not divisible by " +
                                  std::to_string(size) + " ranks (pass split sizes)");
    }
    for (auto& c : counts) c = static_cast<size_t>(rows / size) * row_elems;
    return counts;
  }
  if (splits.size() != counts.size()) {
    throw std::invalid_argument(std::string("nodecomm: ") + what + " split sizes have " +
                                std::to_string(splits.size()) + " entries, the group has " +
                                std::to_string(size) + " ranks");
  }
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (splits[i] < 0) {
      throw std::invalid_argument(std::string("nodecomm: ") + what + " split size " +
                                  std::to_string(splits[i]) + " is negative");
    }
    total += splits[i];
    counts[i] = static_cast<size_t>(splits[i]) * row_elems;
  }
  if (total != rows) {
    throw std::invalid_argument(std::string("nodecomm: ") + what + " split sizes add up to " +
                                std::to_string(total) + " rows, the tensor has " +
                                std::to_string(rows));
  }
  return counts;
}

}  // namespace nodecomm::torch_backend
