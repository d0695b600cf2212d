// The independent reference of the MLSL layer's checks (issue 22, docs/TESTING.md "The MLSL
// layer"): inputs as deterministic functions of (global rank, element index), and the results
// libmlsl must give, derived here from those formulas and from MLSL's documented layout rules
// (docs/MLSL.md "Process groups", docs/MLSL.md "Session, Operation, Activation, ParameterSet",
// §4.5). Nothing here comes from libmlsl or tests/support: a shared helper would hide a shared
// mistake. Only the enums of mlsl.hpp are used.
//
// Every value is a small integer (|x| < 2^20), so float sums over a handful of ranks are exact in
// any order and a mismatch is a bug, never rounding. DT_BYTE holds unsigned bytes and sums wrap
// modulo 256 (docs/MLSL.md "How the API maps onto nodecomm").
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mlsl.hpp>
#include <string>
#include <vector>

namespace mlsl_ref {

inline size_t dtype_size(MLSL::DataType dt) {
  switch (dt) {
    case MLSL::DT_FLOAT:
      return 4;
    case MLSL::DT_DOUBLE:
      return 8;
    case MLSL::DT_BYTE:
      return 1;
  }
  return 0;
}

inline const char* dtype_name(MLSL::DataType dt) {
  switch (dt) {
    case MLSL::DT_FLOAT:
      return "float";
    case MLSL::DT_DOUBLE:
      return "double";
    case MLSL::DT_BYTE:
      return "byte";
  }
  return "?";
}

inline const char* red_name(MLSL::ReductionType rt) {
  switch (rt) {
    case MLSL::RT_SUM:
      return "sum";
    case MLSL::RT_MIN:
      return "min";
    case MLSL::RT_MAX:
      return "max";
  }
  return "?";
}

inline const char* group_name(MLSL::GroupType gt) {
  switch (gt) {
    case MLSL::GT_DATA:
      return "data";
    case MLSL::GT_MODEL:
      return "model";
    case MLSL::GT_GLOBAL:
      return "global";
  }
  return "?";
}

// Element access by runtime dtype: the checks walk buffers of all three types with one loop.
inline double load(MLSL::DataType dt, const void* buf, size_t i) {
  switch (dt) {
    case MLSL::DT_FLOAT: {
      float v;
      std::memcpy(&v, static_cast<const char*>(buf) + i * 4, 4);
      return v;
    }
    case MLSL::DT_DOUBLE: {
      double v;
      std::memcpy(&v, static_cast<const char*>(buf) + i * 8, 8);
      return v;
    }
    case MLSL::DT_BYTE:
      return static_cast<const unsigned char*>(buf)[i];
  }
  return 0;
}

inline void store(MLSL::DataType dt, void* buf, size_t i, double v) {
  switch (dt) {
    case MLSL::DT_FLOAT: {
      float f = static_cast<float>(v);
      std::memcpy(static_cast<char*>(buf) + i * 4, &f, 4);
      return;
    }
    case MLSL::DT_DOUBLE:
      std::memcpy(static_cast<char*>(buf) + i * 8, &v, 8);
      return;
    case MLSL::DT_BYTE:
      static_cast<unsigned char*>(buf)[i] = static_cast<unsigned char>(static_cast<long>(v) & 0xFF);
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Collectives: inputs and reductions.

// Rank g's element i of the operand of the check case `salt`. Floats are integers in
// [-1000, 1000] with both signs, so MIN and MAX differ from SUM; bytes cover 0..255. The salt
// changes every value between cases, so a result left over from an earlier case is caught.
inline double input_value(MLSL::DataType dt, size_t g, size_t i, size_t salt) {
  if (dt == MLSL::DT_BYTE) return static_cast<double>((g * 29 + i * 7 + salt * 3 + 1) & 0xFF);
  return static_cast<double>(static_cast<long>((g * 7919 + i * 31 + salt * 13) % 2001) - 1000);
}

// A value as a buffer of dt holds it: bytes keep the low 8 bits (sums wrap modulo 256).
inline double as_stored(MLSL::DataType dt, double v) {
  if (dt != MLSL::DT_BYTE) return v;
  return static_cast<double>(static_cast<long>(v) & 0xFF);
}

// What a recv buffer holds before a collective: a value no input formula produces for floats
// (and 0xA5 for bytes), so an element the collective should not touch is recognisable.
inline double sentinel(MLSL::DataType dt) {
  return dt == MLSL::DT_BYTE ? 0xA5 : -7777.0;
}

// The reduction of `vals` as libmlsl must compute it: exact for the small integers above;
// unsigned bytes sum modulo 256.
inline double reduce(MLSL::DataType dt, MLSL::ReductionType rt, const std::vector<double>& vals) {
  double acc = vals.empty() ? 0 : vals[0];
  for (size_t k = 1; k < vals.size(); ++k) {
    switch (rt) {
      case MLSL::RT_SUM:
        acc += vals[k];
        break;
      case MLSL::RT_MIN:
        acc = std::min(acc, vals[k]);
        break;
      case MLSL::RT_MAX:
        acc = std::max(acc, vals[k]);
        break;
    }
  }
  if (dt == MLSL::DT_BYTE) acc = static_cast<double>(static_cast<long>(acc) & 0xFF);
  return acc;
}

// ---------------------------------------------------------------------------------------------
// Process groups (docs/MLSL.md "Process groups", MLSL's layout).

// One process group as seen from one member: the global ranks in group order and its index.
struct Group {
  std::vector<size_t> members;
  size_t idx = 0;
  size_t size() const { return members.size(); }
};

struct Layout {
  Group data, model, global;
};

// CreateDistribution(D, M) on a global group of n, for global rank g: with L = D*M, l = g % L
// and replica R = g / L, the model group is the M consecutive ranks R*L + (l/M)*M + j and the
// data group the D ranks R*L + l%M + j*M, both ordered by global rank.
inline Layout grid_layout(size_t n, size_t g, size_t D, size_t M) {
  Layout out;
  const size_t L = D * M, l = g % L, R = g / L;
  for (size_t j = 0; j < M; ++j) out.model.members.push_back(R * L + (l / M) * M + j);
  out.model.idx = l % M;
  for (size_t j = 0; j < D; ++j) out.data.members.push_back(R * L + l % M + j * M);
  out.data.idx = l / M;
  for (size_t j = 0; j < n; ++j) out.global.members.push_back(j);
  out.global.idx = g;
  return out;
}

// CreateDistributionWithColors: the ranks with equal colors form a group, ordered by global
// rank; `data_color[j]` and `model_color[j]` are rank j's colors.
inline Layout color_layout(size_t n, size_t g, const std::vector<int>& data_color,
                           const std::vector<int>& model_color) {
  Layout out;
  for (size_t j = 0; j < n; ++j) {
    if (data_color[j] == data_color[g]) {
      if (j == g) out.data.idx = out.data.members.size();
      out.data.members.push_back(j);
    }
    if (model_color[j] == model_color[g]) {
      if (j == g) out.model.idx = out.model.members.size();
      out.model.members.push_back(j);
    }
    out.global.members.push_back(j);
  }
  out.global.idx = g;
  return out;
}

inline const Group& group_of(const Layout& layout, MLSL::GroupType gt) {
  return gt == MLSL::GT_DATA ? layout.data : gt == MLSL::GT_MODEL ? layout.model : layout.global;
}

// ---------------------------------------------------------------------------------------------
// Operation geometry (docs/MLSL.md "Session, Operation, Activation, ParameterSet").

// The minibatch slice of a process with data index d in a data group of D: G / D rows.
struct MbSlice {
  size_t count, offset;
};
inline MbSlice mb_slice(size_t G, size_t D, size_t d) {
  return {G / D, (G / D) * d};
}

// An activation's feature-map slice: a CC output keeps every feature map (its values are
// partial sums over the model group); everything else holds F / M of them (integer division,
// as MLSL) at m * (F / M).
struct FmSlice {
  size_t count, offset;
};
inline FmSlice fm_slice(size_t F, size_t M, size_t m, bool cc_output) {
  if (cc_output) return {F, 0};
  return {F / M, (F / M) * m};
}

// A ParameterSet's kernels on a process with data index d (of D) and model index m (of M):
// local = K / M at local * m; with distributed update each of the D data members owns
// ceil(local / D) kernels and local is padded to owned * D.
struct KernelSlice {
  size_t local, global_offset, owned, owned_offset;
};
inline KernelSlice kernel_slice(size_t K, size_t D, size_t M, size_t d, size_t m, bool du) {
  KernelSlice s;
  s.local = K / M;
  s.global_offset = s.local * m;
  if (du) {
    s.owned = (s.local + D - 1) / D;
    s.local = s.owned * D;
    s.owned_offset = s.owned * d;
  } else {
    s.owned = s.local;
    s.owned_offset = 0;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Model values. Activations are indexed by the flat position q = fm * fmSize + space inside a
// sample, which is what stays the same when a consumer sees the producer's F x S as F' x S'.

// Forward value that operation `op` writes at iteration `it` for global minibatch row b, flat
// position q, as the process of model index m (0 unless the output is a CC output, whose model
// group members each write partial sums).
inline double act_value(size_t op, size_t it, size_t b, size_t q, size_t m) {
  return static_cast<double>((op * 97 + it * 13 + b * 61 + q * 7) % 499 + 512 * m);
}

// What the consumer of that output must unpack: the sum over the producer's model group when
// the producer is a CC with M > 1 (MLSL reduces partial sums), otherwise the value itself.
inline double act_expected(size_t op, size_t it, size_t b, size_t q, bool summed, size_t M) {
  if (!summed) return act_value(op, it, b, q, 0);
  double sum = 0;
  for (size_t m = 0; m < M; ++m) sum += act_value(op, it, b, q, m);
  return sum;
}

// Backward: the gradient that the consumer operation `op` writes for its input at row b, flat
// position q. Gradients of activations travel without reduction, so the producer must see
// exactly this value.
inline double act_grad_value(size_t op, size_t it, size_t b, size_t q) {
  return static_cast<double>(static_cast<long>((op * 89 + it * 17 + b * 53 + q * 11) % 509) - 250);
}

// Gradient of parameter element e (global index kernel * kernelSize + space) that the process
// of data index d computes at iteration it; the exchange must sum it over the data group.
inline double param_grad_value(size_t op, size_t it, size_t e, size_t d) {
  return static_cast<double>((op * 31 + it * 7 + e * 5) % 211 + 256 * d);
}
inline double param_grad_expected(size_t op, size_t it, size_t e, size_t D) {
  double sum = 0;
  for (size_t d = 0; d < D; ++d) sum += param_grad_value(op, it, e, d);
  return sum;
}

// Parameter element e after the update of iteration it (it = 0: the initial values).
inline double param_value(size_t op, size_t it, size_t e) {
  return static_cast<double>(static_cast<long>((op * 41 + it * 11 + e * 3) % 251) - 100);
}

// ---------------------------------------------------------------------------------------------
// Wire compression bounds (docs/API.md): bf16 loses at most (nodes + 1) * 2^-8 of sum|x_i|;
// int8 quantizes each node's partial sum once with a block scale max|x| / 127, so one step loses
// at most nodes * max|x| / 127 (twice that once error feedback carries a residual). On one node
// nothing is compressed: exact.
inline double bf16_bound(size_t nodes, double sum_abs) {
  return nodes <= 1 ? 0.0 : static_cast<double>(nodes + 1) * sum_abs / 256.0;
}
inline double int8_bound(size_t nodes, double max_abs, bool with_residual) {
  return nodes <= 1 ? 0.0
                    : (with_residual ? 2.0 : 1.0) * static_cast<double>(nodes) * max_abs / 127.0;
}

}  // namespace mlsl_ref
