// The collectives of mlsl_api_check (issue 22, docs/TESTING.md "The MLSL layer"): for each
// distribution the group indices, counts and members of GT_DATA, GT_MODEL and GT_GLOBAL, and every
// collective on each group over a sampled matrix in which every dtype, reduction, root, in-place
// form, buffer kind, completion and count appears; then count 0 and 300 collectives in flight at
// once (past nodecomm's 256 per client). Checked against tests/mlsl/reference.hpp.
#include <sched.h>

#include <cstdio>
#include <mlsl.hpp>
#include <set>
#include <string>
#include <vector>

#include "mlsl_api_check.hpp"
#include "reference.hpp"

namespace api_check {

// ---------------------------------------------------------------------------------------------
// One collective case: what is posted, on which buffers, and how it completes.

enum class Coll {
  kBcast,
  kReduce,
  kAllReduce,
  kAlltoAll,
  kAlltoAllv,
  kGather,
  kAllGather,
  kAllGatherv,
  kScatter,
  kReduceScatter,
  kBarrier
};

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kBcast:
      return "Bcast";
    case Coll::kReduce:
      return "Reduce";
    case Coll::kAllReduce:
      return "AllReduce";
    case Coll::kAlltoAll:
      return "AlltoAll";
    case Coll::kAlltoAllv:
      return "AlltoAllv";
    case Coll::kGather:
      return "Gather";
    case Coll::kAllGather:
      return "AllGather";
    case Coll::kAllGatherv:
      return "AllGatherv";
    case Coll::kScatter:
      return "Scatter";
    case Coll::kReduceScatter:
      return "ReduceScatter";
    case Coll::kBarrier:
      return "Barrier";
  }
  return "?";
}

struct Case {
  Coll coll;
  GroupType gt;
  DataType dt;
  ReductionType rt;
  size_t root;
  bool inplace;
  bool lib_buf;   // Environment::Alloc (arena) or malloc (nodecomm's copy path)
  bool use_test;  // Environment::Test loop or Environment::Wait
  size_t count;
  size_t salt;
};

std::string describe(const DistUnderTest& d, const Case& c) {
  char text[320];
  std::snprintf(text, sizeof text,
                "%s dist %s group %s dtype %s red %s root %zu %s count %zu buf %s %s salt %zu",
                coll_name(c.coll), d.name.c_str(), mlsl_ref::group_name(c.gt),
                mlsl_ref::dtype_name(c.dt), mlsl_ref::red_name(c.rt), c.root,
                c.inplace ? "in-place" : "out-of-place", c.count, c.lib_buf ? "Alloc" : "malloc",
                c.use_test ? "Test-loop" : "Wait", c.salt);
  return text;
}

void complete(CommReq* req, bool use_test) {
  if (!use_test) {
    env().Wait(req);
    return;
  }
  bool done = false;
  while (!done) {
    env().Test(req, &done);
    if (!done) sched_yield();
  }
}

// ---------------------------------------------------------------------------------------------
// The collectives. Each posts one case on this process's group, completes it and compares every
// element with the reference: results, send buffers the call must leave alone, and recv
// elements it must not write.

struct Run {
  DistUnderTest& d;
  const Case& c;
  const mlsl_ref::Group& grp;
  Checker chk;
  size_t n, me;

  Run(DistUnderTest& dist, const Case& cs)
      : d(dist), c(cs), grp(mlsl_ref::group_of(dist.layout, cs.gt)) {
    chk.what = describe(d, c);
    n = grp.size();
    me = grp.idx;
  }
  // Group member r's input element i.
  double in(size_t r, size_t i) const {
    return mlsl_ref::input_value(c.dt, grp.members[r], i, c.salt);
  }
  double reduced(size_t i) const {
    std::vector<double> vals;
    for (size_t r = 0; r < n; ++r) vals.push_back(in(r, i));
    return mlsl_ref::reduce(c.dt, c.rt, vals);
  }
  ApiBuf buf(size_t elems) { return ApiBuf(c.lib_buf, c.dt, elems); }
  void fill_input(ApiBuf& b, size_t elems) {
    for (size_t i = 0; i < elems; ++i) b.set(i, in(me, i));
  }
  void expect_input(ApiBuf& b, size_t elems, const char* what) {
    for (size_t i = 0; i < elems; ++i) chk.expect(what, i, in(me, i), b.get(i));
  }
  void expect_sentinel(ApiBuf& b, size_t from, size_t to, const char* what) {
    for (size_t i = from; i < to; ++i) chk.expect(what, i, mlsl_ref::sentinel(c.dt), b.get(i));
  }

  void bcast() {
    ApiBuf b = buf(c.count);
    if (me == c.root)
      fill_input(b, c.count);
    else
      b.fill(mlsl_ref::sentinel(c.dt));
    complete(d.dist->Bcast(b.ptr(), c.count, c.dt, c.root, c.gt), c.use_test);
    for (size_t i = 0; i < c.count; ++i) chk.expect("buffer", i, in(c.root, i), b.get(i));
  }

  void reduce() {
    ApiBuf s = buf(c.count);
    fill_input(s, c.count);
    if (c.inplace) {
      complete(d.dist->Reduce(s.ptr(), s.ptr(), c.count, c.dt, c.rt, c.root, c.gt), c.use_test);
      if (me == c.root) {
        for (size_t i = 0; i < c.count; ++i) chk.expect("buffer (root)", i, reduced(i), s.get(i));
      } else {
        expect_input(s, c.count, "buffer (non-root, only sent)");
      }
      return;
    }
    ApiBuf r = buf(c.count);
    r.fill(mlsl_ref::sentinel(c.dt));
    complete(d.dist->Reduce(s.ptr(), r.ptr(), c.count, c.dt, c.rt, c.root, c.gt), c.use_test);
    expect_input(s, c.count, "send buffer");
    if (me == c.root) {
      for (size_t i = 0; i < c.count; ++i)
        chk.expect("recv buffer (root)", i, reduced(i), r.get(i));
    } else {
      expect_sentinel(r, 0, c.count, "recv buffer (non-root, unused)");
    }
  }

  void allreduce() {
    ApiBuf s = buf(c.count);
    fill_input(s, c.count);
    if (c.inplace) {
      complete(d.dist->AllReduce(s.ptr(), s.ptr(), c.count, c.dt, c.rt, c.gt), c.use_test);
      for (size_t i = 0; i < c.count; ++i) chk.expect("buffer", i, reduced(i), s.get(i));
      return;
    }
    ApiBuf r = buf(c.count);
    r.fill(mlsl_ref::sentinel(c.dt));
    complete(d.dist->AllReduce(s.ptr(), r.ptr(), c.count, c.dt, c.rt, c.gt), c.use_test);
    expect_input(s, c.count, "send buffer");
    for (size_t i = 0; i < c.count; ++i) chk.expect("recv buffer", i, reduced(i), r.get(i));
  }

  // Block j of the send buffer goes to member j; block i of the result comes from member i.
  void alltoall() {
    const size_t total = n * c.count;
    ApiBuf s = buf(total);
    fill_input(s, total);
    if (c.inplace) {
      // MPI_IN_PLACE meaning: what is sent is read from the buffer before it is overwritten.
      complete(d.dist->AlltoAll(s.ptr(), c.count, s.ptr(), c.dt, c.gt), c.use_test);
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < c.count; ++k)
          chk.expect("buffer", i * c.count + k, in(i, me * c.count + k), s.get(i * c.count + k));
      return;
    }
    ApiBuf r = buf(total);
    r.fill(mlsl_ref::sentinel(c.dt));
    complete(d.dist->AlltoAll(s.ptr(), c.count, r.ptr(), c.dt, c.gt), c.use_test);
    expect_input(s, total, "send buffer");
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < c.count; ++k)
        chk.expect("recv buffer", i * c.count + k, in(i, me * c.count + k), r.get(i * c.count + k));
  }

  // Unequal counts: member i sends cnt(i, j) elements to member j; blocks are laid out with a
  // one-element gap after each, so offsets matter. In place, counts are symmetric (MPI's rule
  // for MPI_IN_PLACE: what goes to j has the size of what comes from j).
  size_t v_count(size_t i, size_t j) const {
    return c.count + (c.inplace ? (i + j) % 3 : (i + 2 * j) % 3);
  }
  // Offset of block j in member i's send layout (and, in place, in its recv layout).
  size_t v_send_off(size_t i, size_t j) const {
    size_t off = 0;
    for (size_t k = 0; k < j; ++k) off += v_count(i, k) + 1;
    return off;
  }
  size_t v_recv_off(size_t j, size_t i) const {  // block from member i in member j's recv layout
    size_t off = 0;
    for (size_t k = 0; k < i; ++k) off += v_count(k, j) + 1;
    return off;
  }
  void alltoallv() {
    std::vector<size_t> sc(n), so(n), rc(n), ro(n);
    for (size_t j = 0; j < n; ++j) {
      sc[j] = v_count(me, j);
      so[j] = v_send_off(me, j);
      rc[j] = v_count(j, me);
      ro[j] = v_recv_off(me, j);
    }
    const size_t send_total = so[n - 1] + sc[n - 1] + 1, recv_total = ro[n - 1] + rc[n - 1] + 1;
    if (c.inplace) {
      ApiBuf b = buf(recv_total);
      fill_input(b, recv_total);
      // The layout is MPI_IN_PLACE's: blocks to send sit at the receive offsets.
      complete(d.dist->AlltoAllv(b.ptr(), rc.data(), ro.data(), b.ptr(), rc.data(), ro.data(), c.dt,
                                 c.gt),
               c.use_test);
      std::vector<bool> written(recv_total, false);
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < rc[i]; ++k) {
          // Member i sent from its own recv layout, where block `me` starts at v_recv_off(i, me).
          chk.expect("buffer", ro[i] + k, in(i, v_recv_off(i, me) + k), b.get(ro[i] + k));
          written[ro[i] + k] = true;
        }
      for (size_t i = 0; i < recv_total; ++i)
        if (!written[i]) chk.expect("buffer gap", i, in(me, i), b.get(i));
      return;
    }
    ApiBuf s = buf(send_total), r = buf(recv_total);
    fill_input(s, send_total);
    r.fill(mlsl_ref::sentinel(c.dt));
    complete(
        d.dist->AlltoAllv(s.ptr(), sc.data(), so.data(), r.ptr(), rc.data(), ro.data(), c.dt, c.gt),
        c.use_test);
    expect_input(s, send_total, "send buffer");
    std::vector<bool> written(recv_total, false);
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < rc[i]; ++k) {
        chk.expect("recv buffer", ro[i] + k, in(i, v_send_off(i, me) + k), r.get(ro[i] + k));
        written[ro[i] + k] = true;
      }
    for (size_t i = 0; i < recv_total; ++i)
      if (!written[i]) chk.expect("recv buffer gap", i, mlsl_ref::sentinel(c.dt), r.get(i));
  }

  // Non-roots' recv is unused; half of the cases pass NULL there (MLSL's callers do both).
  void gather() {
    const size_t total = n * c.count;
    const bool root = me == c.root, null_recv = !root && (c.salt % 2 == 1);
    ApiBuf s = buf(c.count), r = buf(root ? total : c.count);
    fill_input(s, c.count);
    r.fill(mlsl_ref::sentinel(c.dt));
    void* send = s.ptr();
    if (c.inplace && root) {
      // The root's own block is already in place in its recv buffer.
      for (size_t k = 0; k < c.count; ++k) r.set(me * c.count + k, in(me, k));
      send = r.ptr(me * c.count);
    }
    complete(d.dist->Gather(send, c.count, null_recv ? nullptr : r.ptr(), c.dt, c.root, c.gt),
             c.use_test);
    expect_input(s, c.count, "send buffer");
    if (root) {
      for (size_t i = 0; i < n; ++i)
        for (size_t k = 0; k < c.count; ++k)
          chk.expect("recv buffer (root)", i * c.count + k, in(i, k), r.get(i * c.count + k));
    } else if (!null_recv) {
      expect_sentinel(r, 0, c.count, "recv buffer (non-root, unused)");
    }
  }

  void allgather() {
    const size_t total = n * c.count;
    ApiBuf r = buf(total);
    r.fill(mlsl_ref::sentinel(c.dt));
    if (c.inplace) {
      // MLSL's in-place form: this process's block is already at recv + idx * count.
      for (size_t k = 0; k < c.count; ++k) r.set(me * c.count + k, in(me, k));
      complete(d.dist->AllGather(r.ptr(), c.count, r.ptr(), c.dt, c.gt), c.use_test);
    } else {
      ApiBuf s = buf(c.count);
      fill_input(s, c.count);
      complete(d.dist->AllGather(s.ptr(), c.count, r.ptr(), c.dt, c.gt), c.use_test);
      expect_input(s, c.count, "send buffer");
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < c.count; ++k)
        chk.expect("recv buffer", i * c.count + k, in(i, k), r.get(i * c.count + k));
  }

  void allgatherv() {
    std::vector<size_t> rc(n), displ(n);
    size_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      rc[i] = c.count + (2 * i) % 3;
      displ[i] = total;
      total += rc[i];
    }
    ApiBuf r = buf(total);
    r.fill(mlsl_ref::sentinel(c.dt));
    if (c.inplace) {
      // Own block already at its packed offset.
      for (size_t k = 0; k < rc[me]; ++k) r.set(displ[me] + k, in(me, k));
      complete(d.dist->AllGatherv(r.ptr(), rc[me], r.ptr(), rc.data(), c.dt, c.gt), c.use_test);
    } else {
      ApiBuf s = buf(rc[me]);
      fill_input(s, rc[me]);
      complete(d.dist->AllGatherv(s.ptr(), rc[me], r.ptr(), rc.data(), c.dt, c.gt), c.use_test);
      expect_input(s, rc[me], "send buffer");
    }
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < rc[i]; ++k)
        chk.expect("recv buffer", displ[i] + k, in(i, k), r.get(displ[i] + k));
  }

  void scatter() {
    const size_t total = n * c.count;
    const bool root = me == c.root, null_send = !root && (c.salt % 2 == 1);
    ApiBuf s = buf(root ? total : c.count), r = buf(c.count);
    if (root)
      fill_input(s, total);
    else
      s.fill(mlsl_ref::sentinel(c.dt));
    r.fill(mlsl_ref::sentinel(c.dt));
    void* recv = r.ptr();
    if (c.inplace && root) recv = s.ptr(me * c.count);  // the root's own block stays in place
    complete(d.dist->Scatter(null_send ? nullptr : s.ptr(), recv, c.count, c.dt, c.root, c.gt),
             c.use_test);
    if (root) {
      expect_input(s, total, "send buffer (root)");
      if (!c.inplace)
        for (size_t k = 0; k < c.count; ++k)
          chk.expect("recv buffer (root)", k, in(me, me * c.count + k), r.get(k));
    } else {
      for (size_t k = 0; k < c.count; ++k)
        chk.expect("recv buffer", k, in(c.root, me * c.count + k), r.get(k));
      if (!null_send) expect_sentinel(s, 0, c.count, "send buffer (non-root, unused)");
    }
  }

  void reduce_scatter() {
    const size_t total = n * c.count;
    ApiBuf s = buf(total);
    fill_input(s, total);
    if (c.inplace) {
      // MPI_Reduce_scatter_block(MPI_IN_PLACE): the result is left at the START of the buffer.
      complete(d.dist->ReduceScatter(s.ptr(), s.ptr(), c.count, c.dt, c.rt, c.gt), c.use_test);
      for (size_t k = 0; k < c.count; ++k)
        chk.expect("buffer (result at start)", k, reduced(me * c.count + k), s.get(k));
      return;
    }
    ApiBuf r = buf(c.count);
    r.fill(mlsl_ref::sentinel(c.dt));
    complete(d.dist->ReduceScatter(s.ptr(), r.ptr(), c.count, c.dt, c.rt, c.gt), c.use_test);
    expect_input(s, total, "send buffer");
    for (size_t k = 0; k < c.count; ++k)
      chk.expect("recv buffer", k, reduced(me * c.count + k), r.get(k));
  }

  void run() {
    switch (c.coll) {
      case Coll::kBcast:
        return bcast();
      case Coll::kReduce:
        return reduce();
      case Coll::kAllReduce:
        return allreduce();
      case Coll::kAlltoAll:
        return alltoall();
      case Coll::kAlltoAllv:
        return alltoallv();
      case Coll::kGather:
        return gather();
      case Coll::kAllGather:
        return allgather();
      case Coll::kAllGatherv:
        return allgatherv();
      case Coll::kScatter:
        return scatter();
      case Coll::kReduceScatter:
        return reduce_scatter();
      case Coll::kBarrier:
        d.dist->Barrier(c.gt);
        return;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The sampled matrix. Every rank builds the same list in the same order (collectives must be
// posted in one order on every member). dtype x in-place x root x reduction are crossed; buffer
// kind, completion and count rotate with a counter whose period (2 x 2 x 3 = 12) visits all
// their combinations.

size_t g_case_counter = 0;

void fill_rotating(Case& c) {
  static const size_t kCounts[] = {1, 7, 4099};
  const size_t k = g_case_counter++;
  c.lib_buf = k % 2 == 0;
  c.use_test = (k / 2) % 2 == 1;
  c.count = kCounts[k % 3];
  c.salt = k;
}

std::vector<Case> build_cases(GroupType gt, size_t n) {
  static const DataType kTypes[] = {MLSL::DT_FLOAT, MLSL::DT_DOUBLE, MLSL::DT_BYTE};
  static const ReductionType kReds[] = {MLSL::RT_SUM, MLSL::RT_MIN, MLSL::RT_MAX};
  std::vector<Case> cases;
  auto add = [&](Coll coll, DataType dt, ReductionType rt, size_t root, bool inplace) {
    Case c{coll, gt, dt, rt, root, inplace, false, false, 0, 0};
    fill_rotating(c);
    cases.push_back(c);
  };
  for (DataType dt : kTypes) {
    for (size_t root = 0; root < n; ++root) add(Coll::kBcast, dt, MLSL::RT_SUM, root, true);
    for (bool ip : {false, true}) {
      for (size_t root = 0; root < n; ++root) {
        for (ReductionType rt : kReds) add(Coll::kReduce, dt, rt, root, ip);
        add(Coll::kGather, dt, MLSL::RT_SUM, root, ip);
        add(Coll::kScatter, dt, MLSL::RT_SUM, root, ip);
      }
      for (ReductionType rt : kReds) {
        add(Coll::kAllReduce, dt, rt, 0, ip);
        add(Coll::kReduceScatter, dt, rt, 0, ip);
      }
      add(Coll::kAlltoAll, dt, MLSL::RT_SUM, 0, ip);
      add(Coll::kAlltoAllv, dt, MLSL::RT_SUM, 0, ip);
      add(Coll::kAllGather, dt, MLSL::RT_SUM, 0, ip);
      add(Coll::kAllGatherv, dt, MLSL::RT_SUM, 0, ip);
    }
  }
  add(Coll::kBarrier, MLSL::DT_FLOAT, MLSL::RT_SUM, 0, false);
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Per distribution: indices, counts and members, then the matrix.

void check_groups(DistUnderTest& d) {
  Checker chk;
  chk.what = "dist " + d.name + " groups";
  const GroupType kGroups[] = {MLSL::GT_DATA, MLSL::GT_MODEL, MLSL::GT_GLOBAL};
  for (GroupType gt : kGroups) {
    const mlsl_ref::Group& grp = mlsl_ref::group_of(d.layout, gt);
    char what[96];
    std::snprintf(what, sizeof what, "GetProcessIdx(%s)", mlsl_ref::group_name(gt));
    chk.expect(what, 0, static_cast<double>(grp.idx),
               static_cast<double>(d.dist->GetProcessIdx(gt)));
    std::snprintf(what, sizeof what, "GetProcessCount(%s)", mlsl_ref::group_name(gt));
    chk.expect(what, 0, static_cast<double>(grp.size()),
               static_cast<double>(d.dist->GetProcessCount(gt)));
    // Members, not only sizes: an AllGather of the global ranks must list the group in order.
    ApiBuf mine(true, MLSL::DT_DOUBLE, 1), all(false, MLSL::DT_DOUBLE, grp.size());
    mine.set(0, static_cast<double>(g_rank));
    all.fill(-1);
    env().Wait(d.dist->AllGather(mine.ptr(), 1, all.ptr(), MLSL::DT_DOUBLE, gt));
    std::snprintf(what, sizeof what, "members of %s group (AllGather of global ranks)",
                  mlsl_ref::group_name(gt));
    for (size_t i = 0; i < grp.size(); ++i)
      chk.expect(what, i, static_cast<double>(grp.members[i]), all.get(i));
  }
}

// Which values of each dimension every collective has met: the sampling must not leave one out
// (a bit per value: buffer kind 0-1, completion 2-3, count 4-6, dtype 7-9, in place 10-11,
// reduction 12-14).
std::vector<unsigned> g_seen(static_cast<size_t>(Coll::kBarrier) + 1, 0);

void note_coverage(const Case& c) {
  static const size_t kCounts[] = {1, 7, 4099};
  unsigned bits = (1u << (c.lib_buf ? 1 : 0)) | (1u << (c.use_test ? 3 : 2)) |
                  (1u << (7 + static_cast<unsigned>(c.dt))) | (1u << (c.inplace ? 11 : 10)) |
                  (1u << (12 + static_cast<unsigned>(c.rt)));
  for (unsigned k = 0; k < 3; ++k)
    if (c.count == kCounts[k]) bits |= 1u << (4 + k);
  g_seen[static_cast<size_t>(c.coll)] |= bits;
}

void check_coverage() {
  for (size_t k = 0; k < static_cast<size_t>(Coll::kBarrier); ++k) {
    const Coll coll = static_cast<Coll>(k);
    unsigned want = 0x3FF;                       // buffers, completion, counts, dtypes
    if (coll != Coll::kBcast) want |= 3u << 10;  // Bcast is in place by definition
    if (coll == Coll::kReduce || coll == Coll::kAllReduce || coll == Coll::kReduceScatter)
      want |= 7u << 12;
    else
      want |= 1u << 12;  // the others carry RT_SUM, unused
    if ((g_seen[k] & want) != want) {
      std::fprintf(stderr, "[%zu] FAIL sampling: %s met the values 0x%x of 0x%x\n", g_rank,
                   coll_name(coll), g_seen[k] & want, want);
      ++g_failures;
    }
  }
}

size_t run_matrix(DistUnderTest& d, bool with_global) {
  size_t posted = 0;
  const GroupType kGroups[] = {MLSL::GT_DATA, MLSL::GT_MODEL, MLSL::GT_GLOBAL};
  for (GroupType gt : kGroups) {
    if (gt == MLSL::GT_GLOBAL && !with_global) continue;  // the same group in every distribution
    for (const Case& c : build_cases(gt, mlsl_ref::group_of(d.layout, gt).size())) {
      note_coverage(c);
      Run(d, c).run();
      ++posted;
    }
  }
  return posted;
}

// 300 AllReduces posted before any is completed; half the buffers from the arena, half from
// the heap; completed in posting order, every third by a Test loop. nodecomm refuses a 257th
// operation in flight per client, so the layer must complete older ones and retry (docs/MLSL.md
// "Requests").
void flood(DistUnderTest& d) {
  const size_t kOps = 300, kCount = 7;
  std::vector<ApiBuf*> bufs;
  std::vector<CommReq*> reqs;
  for (size_t k = 0; k < kOps; ++k) {
    bufs.push_back(new ApiBuf(k % 2 == 0, MLSL::DT_FLOAT, kCount));
    for (size_t i = 0; i < kCount; ++i)
      bufs[k]->set(i, mlsl_ref::input_value(MLSL::DT_FLOAT, g_rank, i, 100000 + k));
    reqs.push_back(d.dist->AllReduce(bufs[k]->ptr(), bufs[k]->ptr(), kCount, MLSL::DT_FLOAT,
                                     MLSL::RT_SUM, MLSL::GT_GLOBAL));
  }
  std::set<CommReq*> distinct(reqs.begin(), reqs.end());
  Checker chk;
  chk.what = "flood of 300 AllReduce (in place, global) on dist " + d.name;
  chk.expect_true(distinct.size() == kOps, "the 300 requests are not distinct tokens");
  const size_t n = d.layout.global.size();
  for (size_t k = 0; k < kOps; ++k) {
    complete(reqs[k], k % 3 == 2);
    for (size_t i = 0; i < kCount; ++i) {
      double sum = 0;
      for (size_t r = 0; r < n; ++r) sum += mlsl_ref::input_value(MLSL::DT_FLOAT, r, i, 100000 + k);
      chk.expect(k % 2 == 0 ? "op k (Alloc) buffer" : "op k (malloc) buffer", k * 100 + i, sum,
                 bufs[k]->get(i));
    }
    delete bufs[k];
  }
}

// Count 0 is a valid call (MPI's and nodecomm's): it completes and touches nothing.
void zero_counts(DistUnderTest& d) {
  Checker chk;
  chk.what = "count 0 on dist " + d.name;
  ApiBuf a(true, MLSL::DT_FLOAT, 4), b(false, MLSL::DT_FLOAT, 4);
  a.fill(3);
  b.fill(mlsl_ref::sentinel(MLSL::DT_FLOAT));
  env().Wait(d.dist->AllReduce(a.ptr(), b.ptr(), 0, MLSL::DT_FLOAT, MLSL::RT_SUM, MLSL::GT_GLOBAL));
  env().Wait(d.dist->Bcast(a.ptr(), 0, MLSL::DT_FLOAT, 0, MLSL::GT_GLOBAL));
  env().Wait(d.dist->AllGather(a.ptr(), 0, b.ptr(), MLSL::DT_FLOAT, MLSL::GT_GLOBAL));
  for (size_t i = 0; i < 4; ++i) {
    chk.expect("send buffer", i, 3, a.get(i));
    chk.expect("recv buffer", i, mlsl_ref::sentinel(MLSL::DT_FLOAT), b.get(i));
  }
}

}  // namespace api_check
