// Test data and the independent reference for the engine tests (cluster.hpp): rank r's
// element i is a small integer, so every order of reduction gives one exact result, which is
// computed here in the element type, and buffers come from the arena or the heap.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cluster.hpp"
#include "nodecomm.h"

namespace nodecomm::engine_test {

// ---- data and reference -------------------------------------------------------------------

// Rank r's element i: small integers, so that every order of summing floats is exact, and
// integer types wrap alike whatever the order (modular arithmetic).
inline int64_t value(int rank, size_t i, nc_redop_t op) {
  if (op == NC_PROD) return static_cast<int64_t>((static_cast<size_t>(rank) + i) % 3) + 1;
  return static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 13 + 5) % 23) - 11;
}

template <class T>
T combine(T a, T b, nc_redop_t op) {
  switch (op) {
    case NC_SUM:
      return static_cast<T>(a + b);
    case NC_PROD:
      return static_cast<T>(a * b);
    case NC_MIN:
      return std::min(a, b);
    default:
      return std::max(a, b);
  }
}

// The reduction over ranks [0, size) of element i, computed in T.
template <class T>
T reduced(int size, size_t i, nc_redop_t op, const std::vector<int>& ranks = {}) {
  const auto member = [&](int k) { return ranks.empty() ? k : ranks[static_cast<size_t>(k)]; };
  const int n = ranks.empty() ? size : static_cast<int>(ranks.size());
  T acc = static_cast<T>(value(member(0), i, op));
  for (int k = 1; k < n; ++k) acc = combine(acc, static_cast<T>(value(member(k), i, op)), op);
  return acc;
}

template <class F>
void with_dtype(nc_dtype_t dtype, F&& f) {
  switch (dtype) {
    case NC_F32:
      return f(float{});
    case NC_F64:
      return f(double{});
    case NC_I32:
      return f(int32_t{});
    case NC_I64:
      return f(int64_t{});
    case NC_I8:
      return f(int8_t{});
    default:
      return f(uint8_t{});
  }
}

// A buffer in the arena (the zero-copy path) or on the heap (copied through the arena).
class Buf {
 public:
  Buf(nc_context_t* ctx, size_t bytes, bool arena) : ctx_(ctx), arena_(arena) {
    if (arena && bytes > 0) {
      void* p = nullptr;
      if (nc_alloc(ctx, bytes, &p) != NC_OK) {
        throw std::runtime_error(fmt::format("nc_alloc {}: {}", bytes, nc_last_error()));
      }
      data_ = static_cast<uint8_t*>(p);
    } else {
      heap_.resize(std::max<size_t>(bytes, 1));
      data_ = heap_.data();
    }
  }
  ~Buf() {
    if (arena_ && data_ != nullptr && heap_.empty()) nc_free(ctx_, data_);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data_);
  }

 private:
  nc_context_t* ctx_;
  bool arena_;
  uint8_t* data_ = nullptr;
  std::vector<uint8_t> heap_;
};

template <class T>
void fill(T* data, size_t count, int rank, nc_redop_t op, size_t first = 0) {
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<T>(value(rank, first + i, op));
}

// Compares `count` elements with expect(i); records the first few mismatches.
template <class T, class Expect>
bool check(Rank& r, const std::string& what, const T* got, size_t count, Expect&& expect) {
  int wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const T want = expect(i);
    if (got[i] != want) {
      if (wrong++ < 3) {
        r.fail(fmt::format("{}: element {} is {}, expected {}", what, i,
                           static_cast<double>(got[i]), static_cast<double>(want)));
      }
    }
  }
  if (wrong > 3) r.fail(fmt::format("{}: {} wrong elements in all", what, wrong));
  return wrong == 0;
}

inline std::string dt(nc_dtype_t d) {
  return nc_dtype_name(d);
}
inline std::string op_name(nc_redop_t op) {
  return nc_redop_name(op);
}

struct Sample {
  nc_dtype_t dtype;
  nc_redop_t op;
};
inline const std::vector<Sample> kAllreduceSamples = {
    {NC_F32, NC_SUM},  {NC_F32, NC_PROD}, {NC_F32, NC_MIN}, {NC_F32, NC_MAX}, {NC_F64, NC_SUM},
    {NC_F64, NC_PROD}, {NC_I32, NC_SUM},  {NC_I32, NC_MAX}, {NC_I64, NC_SUM}, {NC_I64, NC_MIN},
    {NC_I8, NC_SUM},   {NC_I8, NC_PROD},  {NC_U8, NC_SUM},  {NC_U8, NC_MIN}};

// One allreduce of `count` elements, in place or not, from the arena or the heap.
inline void allreduce_once(Rank& r, nc_dtype_t dtype, nc_redop_t op, size_t count, bool in_place,
                           bool arena, nc_comm_t comm = NC_COMM_WORLD,
                           const std::vector<int>& members = {}, int size = 0) {
  with_dtype(dtype, [&]<class T>(T) {
    const std::string what =
        fmt::format("allreduce {} {} count {} {} {}", dt(dtype), op_name(op), count,
                    in_place ? "in place" : "out of place", arena ? "arena" : "heap");
    Buf send(r.ctx, count * sizeof(T), arena);
    Buf recv(r.ctx, count * sizeof(T), arena);
    fill(send.as<T>(), count, r.rank, op);
    T* out = in_place ? send.as<T>() : recv.as<T>();
    nc_request_t req = 0;
    const nc_status_t s =
        nc_allreduce(r.ctx, send.as<T>(), out, count, dtype, op, comm, nullptr, &req);
    if (!wait_ok(r, s, req, what)) return;
    check(r, what, out, count,
          [&](size_t i) { return reduced<T>(size > 0 ? size : r.size, i, op, members); });
    if (!in_place) {
      check(r, what + " (send untouched)", send.as<T>(), count,
            [&](size_t i) { return static_cast<T>(value(r.rank, i, op)); });
    }
  });
}

}  // namespace nodecomm::engine_test
