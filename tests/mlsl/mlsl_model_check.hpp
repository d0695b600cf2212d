// What the files of mlsl_model_check share (issue 22, docs/TESTING.md "The MLSL layer"): the rank,
// the world size, the failure count and the session being checked; failure reports; a distribution
// with its reference layout; an operation's specification, a chain's options and an activation
// tile.
//   mlsl_model_check.cpp  main, the chains on each distribution, the session's lifecycle
//   mlsl_model_net.cpp    one chain in one session through MLSL's training loop (class Net)
//   mlsl_model_tiles.cpp  tiles packed into and unpacked from comm buffers by the library's blocks
//   mlsl_model_pairs.cpp  exchanges between different distributions
//   mlsl_model_quant.cpp  --mode quant
#pragma once

#include <cstddef>
#include <mlsl.hpp>
#include <string>
#include <vector>

#include "reference.hpp"

namespace model_check {

using MLSL::Activation;
using MLSL::CommBlockInfo;
using MLSL::DataType;
using MLSL::Distribution;
using MLSL::Environment;
using MLSL::Operation;
using MLSL::OpType;
using MLSL::ParameterSet;
using MLSL::Session;

inline Environment& env() {
  return Environment::GetEnv();
}

extern size_t g_rank;
extern size_t g_world;
extern size_t g_failures;
extern std::string g_where;  // the session being checked, for messages

// Reports a failure in g_where (the first 60 are printed, every one is counted).
void fail(const char* fmt, ...);
void expect_eq(const char* what, size_t expected, size_t got);
void expect_ptr(const char* what, const void* expected, const void* got);

struct DistInfo {
  std::string name;
  Distribution* dist = nullptr;
  mlsl_ref::Layout lay;
  size_t D() const { return lay.data.size(); }
  size_t M() const { return lay.model.size(); }
  size_t d() const { return lay.data.idx; }
  size_t m() const { return lay.model.idx; }
};

DistInfo make_dist(size_t D, size_t M);

// One operation of a chain: what it registers and on which distribution.
struct OpSpec {
  OpType type;
  DistInfo* dist;
  size_t fin, sin, fout, sout;
  DataType act_dt;
  size_t kernels, kernel_size;  // kernels == 0: no parameter set
  DataType param_dt;
};

struct NetOptions {
  size_t G = 8;
  bool du = false;        // distributed update
  bool user_buf = false;  // malloc'd parameter and comm buffers instead of Alloc/GetCommBuf
  bool use_test = false;  // TestGradientComm loops instead of WaitGradientComm
  size_t epochs = 2, iters = 3;
  bool check_stats = false;
  bool print_stats = false;
};

// A local activation tile: [minibatch row][local feature map][space], row-major.
struct Tile {
  DataType dt;
  size_t mb, mb_off, fm, fm_off, fs;  // rows and their global offset, maps and theirs, fm size
  void* p;
  size_t elems() const { return mb * fm * fs; }
  size_t index(size_t i, size_t j, size_t s) const { return (i * fm + j) * fs + s; }
  // Global row and flat position inside the sample of local element (i, j, s).
  size_t row(size_t i) const { return mb_off + i; }
  size_t flat(size_t j, size_t s) const { return (fm_off + j) * fs + s; }
};

// mlsl_model_tiles.cpp: the tile into a comm buffer by the activation's pack blocks, and out of
// one by its unpack blocks.
void pack(Activation* act, const Tile& t, void* comm, size_t comm_elems);
void unpack(Activation* act, const Tile& t, const void* comm);

// mlsl_model_net.cpp: the operations of `specs`, each output linked to the next input, in one
// session named `name`, trained as `opt` says and checked element by element.
void train_chain(const std::vector<OpSpec>& specs, const NetOptions& opt, const std::string& name);

// mlsl_model_pairs.cpp: two operations on different distributions, for each exchange case.
void run_pairs();

// mlsl_model_quant.cpp: --mode quant.
int run_quant();

}  // namespace model_check
