// Integration check run under nodecomm-launch: every rank runs allreduce over the listed
// element counts, for each dtype, out of place, in place, and from memory outside the arena,
// and compares every element with a reference computed here from the same pattern.
//
//   allreduce_check [--counts 1,7,4099,1048579] [--dtypes f32,f64,i32,i64] [--ops sum]
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nodecomm.hpp"

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// Small integers: every sum of up to a few hundred ranks is exact in every dtype, so the
// reference does not depend on the order in which the daemon adds.
int64_t pattern(int rank, uint64_t i) {
  return static_cast<int64_t>((static_cast<uint64_t>(rank) * 7919 + i * 104729) % 61) - 30;
}

template <class T>
int check_one(nodecomm::Context& ctx, uint64_t count, const char* mode, nc_redop_t op) {
  const int rank = ctx.world_rank();
  const int size = ctx.world_size();
  auto expected = [&](uint64_t i) {
    int64_t acc = pattern(0, i);
    for (int r = 1; r < size; ++r) {
      const int64_t v = pattern(r, i);
      if (op == NC_SUM) acc += v;
      if (op == NC_MIN) acc = std::min(acc, v);
      if (op == NC_MAX) acc = std::max(acc, v);
    }
    return static_cast<T>(acc);
  };
  std::vector<T> heap_send;
  std::vector<T> heap_recv;
  nodecomm::Buffer<T> send;
  nodecomm::Buffer<T> recv;
  T* s = nullptr;
  T* r = nullptr;
  if (std::strcmp(mode, "heap") == 0) {
    heap_send.resize(count);
    heap_recv.assign(count, T(-99));
    s = heap_send.data();
    r = heap_recv.data();
  } else {
    send = ctx.alloc<T>(count);
    s = send.data();
    if (std::strcmp(mode, "inplace") == 0) {
      r = s;
    } else {
      recv = ctx.alloc<T>(count);
      r = recv.data();
      for (uint64_t i = 0; i < count; ++i) r[i] = T(-99);
    }
  }
  for (uint64_t i = 0; i < count; ++i) s[i] = static_cast<T>(pattern(rank, i));
  nc_request_t id = 0;
  const std::string name = std::string("check.") + mode;
  nc_op_attr_t attr{0, name.c_str(), NC_COMPRESS_NONE};
  nodecomm::check(nc_allreduce(ctx.handle(), s, r, count, nodecomm::dtype_of<T>(), op,
                               NC_COMM_WORLD, &attr, &id));
  nodecomm::check(nc_wait(ctx.handle(), id));
  int wrong = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (r[i] != expected(i)) {
      if (wrong < 3) {
        std::fprintf(stderr,
                     "rank %d: %s %s count %" PRIu64 " element %" PRIu64 ": got %g expected %g\n",
                     rank, nc_dtype_name(nodecomm::dtype_of<T>()), mode, count, i,
                     static_cast<double>(r[i]), static_cast<double>(expected(i)));
      }
      ++wrong;
    }
  }
  // Out of place must leave the send buffer alone.
  if (std::strcmp(mode, "inplace") != 0) {
    for (uint64_t i = 0; i < count; ++i) {
      if (s[i] != static_cast<T>(pattern(rank, i))) {
        std::fprintf(stderr, "rank %d: %s send buffer changed at %" PRIu64 "\n", rank, mode, i);
        ++wrong;
        break;
      }
    }
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  std::string counts = "1,7,4099,1048579";
  std::string dtypes = "f32,f64,i32,i64";
  std::string ops = "sum";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--counts")
      counts = argv[i + 1];
    else if (flag == "--dtypes")
      dtypes = argv[i + 1];
    else if (flag == "--ops")
      ops = argv[i + 1];
    else {
      std::fprintf(stderr, "allreduce_check: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  try {
    uint64_t max_count = 0;
    for (const auto& c : split(counts)) max_count = std::max<uint64_t>(max_count, std::stoull(c));
    nodecomm::InitOptions options;
    options.arena_bytes = std::max<uint64_t>(64ULL << 20, 3 * max_count * 8 + (4ULL << 20));
    nodecomm::Context ctx(options);
    int wrong = 0;
    int runs = 0;
    for (const auto& op_name : split(ops)) {
      nc_redop_t op{};
      nodecomm::check(nc_redop_parse(op_name.c_str(), &op));
      for (const auto& dtype_name : split(dtypes)) {
        nc_dtype_t dtype{};
        nodecomm::check(nc_dtype_parse(dtype_name.c_str(), &dtype));
        for (const auto& c : split(counts)) {
          const uint64_t count = std::stoull(c);
          for (const char* mode : {"outofplace", "inplace", "heap"}) {
            switch (dtype) {
              case NC_F32:
                wrong += check_one<float>(ctx, count, mode, op);
                break;
              case NC_F64:
                wrong += check_one<double>(ctx, count, mode, op);
                break;
              case NC_I32:
                wrong += check_one<int32_t>(ctx, count, mode, op);
                break;
              case NC_I64:
                wrong += check_one<int64_t>(ctx, count, mode, op);
                break;
              default:
                std::fprintf(stderr, "allreduce_check: dtype %s not covered here\n",
                             dtype_name.c_str());
                return 2;
            }
            ++runs;
          }
        }
      }
    }
    std::printf("rank %d/%d (node %d/%d): %d allreduce runs, %d wrong elements\n", ctx.world_rank(),
                ctx.world_size(), ctx.node_index(), ctx.node_count(), runs, wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const nodecomm::Error& e) {
    std::fprintf(stderr, "allreduce_check: %s (%s)\n", e.what(), nc_status_string(e.status()));
    return 1;
  }
}
