// What the files of mlsl_api_check share (issue 22, docs/TESTING.md "The MLSL layer"): the rank and
// failure count, the per-case checker, a buffer from the arena or the heap, and a distribution
// under test. mlsl_api_check.cpp checks the Environment, runs the matrix on every distribution and
// holds the misuse modes; mlsl_api_collectives.cpp posts and checks the collectives.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <mlsl.hpp>
#include <string>

#include "reference.hpp"

namespace api_check {

using MLSL::CommReq;
using MLSL::DataType;
using MLSL::Distribution;
using MLSL::Environment;
using MLSL::GroupType;
using MLSL::ReductionType;

inline Environment& env() {
  return Environment::GetEnv();
}

extern size_t g_rank;      // global rank, for messages
extern size_t g_failures;  // mismatches seen (each case prints its first few)

struct DistUnderTest {
  std::string name;
  Distribution* dist;
  mlsl_ref::Layout layout;
};

// Counts mismatches of one case and prints the first few of them.
struct Checker {
  std::string what;
  size_t bad = 0;
  void expect(const char* buffer, size_t i, double expected, double got) {
    if (expected == got) return;
    if (bad < 4) {
      std::fprintf(stderr, "[%zu] FAIL %s: %s element %zu expected %.17g got %.17g\n", g_rank,
                   what.c_str(), buffer, i, expected, got);
    }
    ++bad;
    ++g_failures;
  }
  void expect_true(bool ok, const char* message) {
    if (ok) return;
    std::fprintf(stderr, "[%zu] FAIL %s: %s\n", g_rank, what.c_str(), message);
    ++bad;
    ++g_failures;
  }
};

// A buffer of `elems` elements of dt, from the arena (Environment::Alloc) or the heap.
class ApiBuf {
 public:
  ApiBuf(bool lib, DataType dt, size_t elems) : lib_(lib), dt_(dt), elems_(elems) {
    const size_t bytes = std::max<size_t>(1, elems * mlsl_ref::dtype_size(dt));
    p_ = lib ? env().Alloc(bytes, 64) : std::malloc(bytes);
    if (p_ == nullptr) {
      std::fprintf(stderr, "[%zu] FAIL: %s of %zu bytes returned NULL\n", g_rank,
                   lib ? "Environment::Alloc" : "malloc", bytes);
      std::exit(1);
    }
  }
  ~ApiBuf() {
    if (lib_)
      env().Free(p_);
    else
      std::free(p_);
  }
  ApiBuf(const ApiBuf&) = delete;
  ApiBuf& operator=(const ApiBuf&) = delete;
  void* ptr(size_t elem = 0) { return static_cast<char*>(p_) + elem * mlsl_ref::dtype_size(dt_); }
  double get(size_t i) const { return mlsl_ref::load(dt_, p_, i); }
  void set(size_t i, double v) { mlsl_ref::store(dt_, p_, i, v); }
  void fill(double v) {
    for (size_t i = 0; i < elems_; ++i) set(i, v);
  }
  size_t elems() const { return elems_; }

 private:
  bool lib_;
  DataType dt_;
  size_t elems_;
  void* p_;
};

// Completes one request by Environment::Wait, or by an Environment::Test loop.
void complete(CommReq* req, bool use_test);

// mlsl_api_collectives.cpp: per distribution, the groups and the sampled matrix of collectives
// (returns how many it posted), then the sampling's coverage, count 0 and 300 in flight.
void check_groups(DistUnderTest& d);
size_t run_matrix(DistUnderTest& d, bool with_global);
void check_coverage();
void zero_counts(DistUnderTest& d);
void flood(DistUnderTest& d);

}  // namespace api_check
