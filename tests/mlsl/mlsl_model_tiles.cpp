// Activation tiles of mlsl_model_check (issue 22, docs/TESTING.md "The MLSL layer") copied into and
// out of comm buffers by the blocks the library gives (CommBlockInfo), as MLSL's programs pack and
// unpack.
#include <cstring>
#include <mlsl.hpp>

#include "mlsl_model_check.hpp"
#include "reference.hpp"

namespace model_check {

// Copies between a tile and a comm buffer by the blocks the library gave, after checking that
// each block lies inside both (a bad block is reported, not followed into foreign memory).
bool block_ok(const char* what, CommBlockInfo* b, const Tile& t, size_t comm_elems,
              bool check_comm) {
  const size_t mbo = b->GetMbOffset(), mbc = b->GetMbCount(), fmo = b->GetFmOffset(),
               fmc = b->GetFmCount(), fs = b->GetFmSize(), off = b->GetBufOffset();
  bool ok = mbo + mbc <= t.mb && fmo + fmc <= t.fm && fs == t.fs && b->GetDataType() == t.dt;
  if (check_comm) ok = ok && off + mbc * fmc * fs <= comm_elems;
  if (!ok)
    fail(
        "%s block (mb %zu+%zu, fm %zu+%zu, fm size %zu, dtype %d, buf offset %zu) does not fit "
        "the tile (mb %zu, fm %zu, fm size %zu, dtype %d) or comm buffer (%zu elements)",
        what, mbo, mbc, fmo, fmc, fs, static_cast<int>(b->GetDataType()), off, t.mb, t.fm, t.fs,
        static_cast<int>(t.dt), comm_elems);
  return ok;
}

void pack(Activation* act, const Tile& t, void* comm, size_t comm_elems) {
  const size_t es = mlsl_ref::dtype_size(t.dt);
  for (size_t k = 0; k < act->GetPackBlockCount(); ++k) {
    CommBlockInfo* b = act->GetPackBlock(k);
    if (!block_ok("pack", b, t, comm_elems, true)) continue;
    const size_t fmc = b->GetFmCount(), fmo = b->GetFmOffset(), mbo = b->GetMbOffset();
    for (size_t i = 0; i < b->GetMbCount(); ++i)
      std::memcpy(static_cast<char*>(comm) + (b->GetBufOffset() + i * fmc * t.fs) * es,
                  static_cast<char*>(t.p) + t.index(mbo + i, fmo, 0) * es, fmc * t.fs * es);
  }
}

void unpack(Activation* act, const Tile& t, const void* comm) {
  const size_t es = mlsl_ref::dtype_size(t.dt);
  for (size_t k = 0; k < act->GetUnpackBlockCount(); ++k) {
    CommBlockInfo* b = act->GetUnpackBlock(k);
    if (!block_ok("unpack", b, t, 0, false)) continue;
    const size_t fmc = b->GetFmCount(), fmo = b->GetFmOffset(), mbo = b->GetMbOffset();
    for (size_t i = 0; i < b->GetMbCount(); ++i)
      std::memcpy(static_cast<char*>(t.p) + t.index(mbo + i, fmo, 0) * es,
                  static_cast<const char*>(comm) + (b->GetBufOffset() + i * fmc * t.fs) * es,
                  fmc * t.fs * es);
  }
}

}  // namespace model_check
