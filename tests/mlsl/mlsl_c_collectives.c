/*
 * mlsl_c_check's collectives (mlsl_c_check.h): every Distribution collective on every group
 * type, data types, counts, in place and out of place, both buffer kinds and both ways of
 * completing, each result compared element by element with a reference computed here from the
 * inputs' formulas and the group layout; DT_BYTE wrapping; a distribution made from colors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlsl_c_check.h"

/* ---- names in messages ---- */

static const char* dt_name(mlsl_data_type dt) {
  return dt == DT_DOUBLE ? "double" : dt == DT_FLOAT ? "float" : "byte";
}

static const char* gt_name(mlsl_group_type gt) {
  return gt == GT_DATA ? "data" : gt == GT_MODEL ? "model" : "global";
}

static const char* rt_name(mlsl_reduction_type rt) {
  return rt == RT_SUM ? "sum" : rt == RT_MIN ? "min" : "max";
}

/* ---- inputs: small integers from (global rank, element) ---- */

static double in_val(int g, size_t i) {
  return (double)((g * 37 + i * 11) % 101);
}

static double a2a_val(int src, size_t dst_idx, size_t i) {
  return (double)((src * 29 + dst_idx * 7 + i * 3) % 113);
}

static double reduce_ref(mlsl_reduction_type rt, const group_t* grp, size_t i) {
  double acc = in_val(grp->member[0], i);
  size_t j;
  for (j = 1; j < grp->n; j++) {
    double v = in_val(grp->member[j], i);
    if (rt == RT_SUM)
      acc += v;
    else if (rt == RT_MIN)
      acc = v < acc ? v : acc;
    else
      acc = v > acc ? v : acc;
  }
  return acc;
}

/* ---- one collective's setting ---- */

typedef struct {
  mlsl_distribution dist;
  mlsl_group_type gt;
  group_t grp;
  mlsl_data_type dt;
  size_t count;
  int in_place;
  int lib;      /* buffers from mlsl_environment_alloc, else malloc */
  int use_test; /* completed by an mlsl_environment_test loop, else mlsl_environment_wait */
  char name[200];
} coll_t;

static void coll_name(coll_t* c, const char* what) {
  snprintf(c->name, sizeof c->name, "%s %s group, %s x %zu, %s, %s buffers, %s", what,
           gt_name(c->gt), dt_name(c->dt), c->count, c->in_place ? "in place" : "out of place",
           c->lib ? "library" : "malloc", c->use_test ? "test loop" : "wait");
}

static void complete(const coll_t* c, mlsl_comm_req req) {
  static int stale_checked = 0;
  if (!c->use_test) {
    OK(mlsl_environment_wait(env, req));
    return;
  }
  /* One check for the whole loop: the number of polls differs between ranks. */
  for (;;) {
    int done = -1;
    if (mlsl_environment_test(env, req, &done) != CMLSL_SUCCESS) {
      EXPECT(0, "%s: mlsl_environment_test failed", c->name);
      return;
    }
    if (done != 0) {
      EXPECT_EQ("mlsl_environment_test: is_completed as a whole int", done, 1);
      break;
    }
  }
  /* A test that reported completion consumed the request: it is a stale handle now. */
  if (!stale_checked) {
    int done = 7;
    stale_checked = 1;
    REFUSED(mlsl_environment_wait(env, req));
    REFUSED(mlsl_environment_test(env, req, &done));
  }
}

static void check_bcast(coll_t* c) {
  size_t root = (c->count + (size_t)c->in_place) % c->grp.n, i;
  void* buf = buf_new(c->lib, c->count * dt_size(c->dt));
  double* ref = ref_new(c->count);
  mlsl_comm_req req = 0;
  coll_name(c, "bcast");
  for (i = 0; i < c->count; i++) {
    put_at(buf, c->dt, i, in_val(rank, i));
    ref[i] = in_val(c->grp.member[root], i);
  }
  if (OK(mlsl_distribution_bcast(c->dist, buf, c->count, c->dt, root, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, buf, c->dt, ref, c->count);
  }
  buf_free(c->lib, buf);
  free(ref);
}

static void check_reduce(coll_t* c, mlsl_reduction_type rt) {
  size_t n = c->count, root = (n + (size_t)c->in_place + 1) % c->grp.n, i;
  size_t bytes = n * dt_size(c->dt);
  void* send = buf_new(c->lib, bytes);
  void* recv = c->in_place ? send : buf_new(c->lib, bytes);
  double* ref = ref_new(n);
  mlsl_comm_req req = 0;
  char what[64];
  snprintf(what, sizeof what, "reduce %s root %zu", rt_name(rt), root);
  coll_name(c, what);
  for (i = 0; i < n; i++) {
    put_at(send, c->dt, i, in_val(rank, i));
    ref[i] = reduce_ref(rt, &c->grp, i);
  }
  if (OK(mlsl_distribution_reduce(c->dist, send, recv, n, c->dt, rt, root, c->gt, &req))) {
    complete(c, req);
    if (c->grp.k == root) expect_elems(__LINE__, c->name, recv, c->dt, ref, n);
  }
  if (!c->in_place) buf_free(c->lib, recv);
  buf_free(c->lib, send);
  free(ref);
}

static void check_all_reduce(coll_t* c, mlsl_reduction_type rt) {
  size_t n = c->count, i;
  size_t bytes = n * dt_size(c->dt);
  void* send = buf_new(c->lib, bytes);
  void* recv = c->in_place ? send : buf_new(c->lib, bytes);
  double* ref = ref_new(n);
  double* orig = ref_new(n);
  mlsl_comm_req req = 0;
  char what[64];
  snprintf(what, sizeof what, "all_reduce %s", rt_name(rt));
  coll_name(c, what);
  for (i = 0; i < n; i++) {
    orig[i] = in_val(rank, i);
    put_at(send, c->dt, i, orig[i]);
    ref[i] = reduce_ref(rt, &c->grp, i);
  }
  if (OK(mlsl_distribution_all_reduce(c->dist, send, recv, n, c->dt, rt, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, recv, c->dt, ref, n);
    if (!c->in_place) expect_elems(__LINE__, c->name, send, c->dt, orig, n); /* untouched */
  }
  if (!c->in_place) buf_free(c->lib, recv);
  buf_free(c->lib, send);
  free(ref);
  free(orig);
}

/* AlltoAll: block j of the send buffer goes to group member j. In place: one buffer. */
static void check_all_to_all(coll_t* c) {
  size_t n = c->count, gn = c->grp.n, j, i;
  size_t bytes = n * gn * dt_size(c->dt);
  void* send = buf_new(c->lib, bytes);
  void* recv = c->in_place ? send : buf_new(c->lib, bytes);
  double* ref = ref_new(n * gn);
  mlsl_comm_req req = 0;
  coll_name(c, "all_to_all");
  for (j = 0; j < gn; j++) {
    for (i = 0; i < n; i++) {
      put_at(send, c->dt, j * n + i, a2a_val(rank, j, i));
      ref[j * n + i] = a2a_val(c->grp.member[j], c->grp.k, i);
    }
  }
  if (OK(mlsl_distribution_all_to_all(c->dist, send, n, recv, c->dt, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, recv, c->dt, ref, n * gn);
  }
  if (!c->in_place) buf_free(c->lib, recv);
  buf_free(c->lib, send);
  free(ref);
}

/* AlltoAllv with counts that differ per pair (symmetric, so that MLSL's in-place form, which
 * sends each block from where the reply lands, is well defined) and gaps between blocks that
 * must stay untouched. */
static size_t a2av_count(size_t base, size_t a, size_t b) {
  return base + (a + b) % 3;
}

static void check_all_to_allv(coll_t* c) {
  size_t gn = c->grp.n, k = c->grp.k, j, i, send_total = 0, recv_total = 0;
  size_t scount[MAX_GROUP], soff[MAX_GROUP], rcount[MAX_GROUP], roff[MAX_GROUP];
  const double gap = 99;
  void *send, *recv;
  double* ref;
  mlsl_comm_req req = 0;
  coll_name(c, "all_to_allv");
  for (j = 0; j < gn; j++) {
    scount[j] = a2av_count(c->count, k, j);
    soff[j] = send_total;
    send_total += scount[j] + 1;
    rcount[j] = a2av_count(c->count, j, k);
    roff[j] = recv_total;
    recv_total += rcount[j] + 2;
  }
  if (c->in_place) {
    /* MLSL's (MPI's) in-place form: the data to send lies at the receive offsets. */
    memcpy(scount, rcount, sizeof scount);
    memcpy(soff, roff, sizeof soff);
    send_total = recv_total;
  }
  send = buf_new(c->lib, send_total * dt_size(c->dt));
  recv = c->in_place ? send : buf_new(c->lib, recv_total * dt_size(c->dt));
  ref = ref_new(recv_total);
  for (i = 0; i < send_total; i++) put_at(send, c->dt, i, gap);
  for (i = 0; i < recv_total; i++) {
    if (!c->in_place) put_at(recv, c->dt, i, gap);
    ref[i] = gap;
  }
  for (j = 0; j < gn; j++) {
    for (i = 0; i < scount[j]; i++) put_at(send, c->dt, soff[j] + i, a2a_val(rank, j, i));
    for (i = 0; i < rcount[j]; i++) ref[roff[j] + i] = a2a_val(c->grp.member[j], k, i);
  }
  if (OK(mlsl_distribution_all_to_allv(c->dist, send, scount, soff, recv, rcount, roff, c->dt,
                                       c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, recv, c->dt, ref, recv_total);
  }
  if (!c->in_place) buf_free(c->lib, recv);
  buf_free(c->lib, send);
  free(ref);
}

/* Gather: the root receives block j from member j. In place (at the root): the root's own
 * block is already at recv + root * count and is passed as the send buffer; non-roots pass no
 * receive buffer. */
static void check_gather(coll_t* c) {
  size_t n = c->count, gn = c->grp.n, k = c->grp.k, root = (n + 2 + (size_t)c->in_place) % gn;
  size_t j, i, bytes = n * dt_size(c->dt);
  void* mine = buf_new(c->lib, bytes);
  void* all = buf_new(c->lib, bytes * gn);
  void *send = mine, *recv = all;
  double* ref = ref_new(n * gn);
  mlsl_comm_req req = 0;
  char what[64];
  snprintf(what, sizeof what, "gather root %zu", root);
  coll_name(c, what);
  for (i = 0; i < n * gn; i++) put_at(all, c->dt, i, 77);
  for (i = 0; i < n; i++) put_at(mine, c->dt, i, in_val(rank, i));
  for (j = 0; j < gn; j++)
    for (i = 0; i < n; i++) ref[j * n + i] = in_val(c->grp.member[j], i);
  if (c->in_place) {
    if (k == root) {
      memcpy((char*)all + root * bytes, mine, bytes);
      send = (char*)all + root * bytes;
    } else {
      recv = NULL;
    }
  }
  if (OK(mlsl_distribution_gather(c->dist, send, n, recv, c->dt, root, c->gt, &req))) {
    complete(c, req);
    if (k == root) expect_elems(__LINE__, c->name, all, c->dt, ref, n * gn);
  }
  buf_free(c->lib, all);
  buf_free(c->lib, mine);
  free(ref);
}

/* AllGather. In place: send == recv and this process's block is already at recv + k * count. */
static void check_all_gather(coll_t* c) {
  size_t n = c->count, gn = c->grp.n, k = c->grp.k, j, i, bytes = n * dt_size(c->dt);
  void* all = buf_new(c->lib, bytes * gn);
  void* send = c->in_place ? all : buf_new(c->lib, bytes);
  double* ref = ref_new(n * gn);
  mlsl_comm_req req = 0;
  coll_name(c, "all_gather");
  for (i = 0; i < n * gn; i++) put_at(all, c->dt, i, 77);
  for (i = 0; i < n; i++) {
    if (c->in_place)
      put_at(all, c->dt, k * n + i, in_val(rank, i));
    else
      put_at(send, c->dt, i, in_val(rank, i));
  }
  for (j = 0; j < gn; j++)
    for (i = 0; i < n; i++) ref[j * n + i] = in_val(c->grp.member[j], i);
  if (OK(mlsl_distribution_all_gather(c->dist, send, n, all, c->dt, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, all, c->dt, ref, n * gn);
  }
  if (!c->in_place) buf_free(c->lib, send);
  buf_free(c->lib, all);
  free(ref);
}

/* AllGatherv (nodecomm extension of mlsl.h): member j contributes count + j elements, packed. In
 * place: send == recv, own block already at its displacement. */
static void check_all_gatherv(coll_t* c) {
  size_t gn = c->grp.n, k = c->grp.k, j, i, total = 0;
  size_t counts[MAX_GROUP], displ[MAX_GROUP];
  void *all, *send;
  double* ref;
  mlsl_comm_req req = 0;
  coll_name(c, "all_gatherv");
  for (j = 0; j < gn; j++) {
    counts[j] = c->count + j;
    displ[j] = total;
    total += counts[j];
  }
  all = buf_new(c->lib, total * dt_size(c->dt));
  send = c->in_place ? all : buf_new(c->lib, counts[k] * dt_size(c->dt));
  ref = ref_new(total);
  for (i = 0; i < total; i++) put_at(all, c->dt, i, 77);
  for (i = 0; i < counts[k]; i++)
    put_at(send, c->dt, (c->in_place ? displ[k] : 0) + i, in_val(rank, i));
  for (j = 0; j < gn; j++)
    for (i = 0; i < counts[j]; i++) ref[displ[j] + i] = in_val(c->grp.member[j], i);
  if (OK(mlsl_distribution_all_gatherv(c->dist, send, counts[k], all, counts, c->dt, c->gt,
                                       &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, all, c->dt, ref, total);
  }
  if (!c->in_place) buf_free(c->lib, send);
  buf_free(c->lib, all);
  free(ref);
}

/* Scatter: member k receives block k of the root's buffer. In place (at the root): the root's
 * receive buffer is its own block of the send buffer; non-roots pass no send buffer. */
static void check_scatter(coll_t* c) {
  size_t n = c->count, gn = c->grp.n, k = c->grp.k, root = (n + 3 + (size_t)c->in_place) % gn;
  size_t i, bytes = n * dt_size(c->dt);
  void* all = buf_new(c->lib, bytes * gn);
  void* mine = buf_new(c->lib, bytes);
  void *send = all, *recv = mine, *result = mine;
  double* ref = ref_new(n);
  mlsl_comm_req req = 0;
  char what[64];
  snprintf(what, sizeof what, "scatter root %zu", root);
  coll_name(c, what);
  for (i = 0; i < n * gn; i++) put_at(all, c->dt, i, in_val(rank, i));
  for (i = 0; i < n; i++) {
    put_at(mine, c->dt, i, 77);
    ref[i] = in_val(c->grp.member[root], k * n + i);
  }
  if (c->in_place) {
    if (k == root) {
      recv = result = (char*)all + root * bytes;
    } else {
      send = NULL;
    }
  }
  if (OK(mlsl_distribution_scatter(c->dist, send, recv, n, c->dt, root, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, result, c->dt, ref, n);
  }
  buf_free(c->lib, mine);
  buf_free(c->lib, all);
  free(ref);
}

/* ReduceScatter: member k gets the reduction of everyone's block k. In place: send == recv
 * and the result is left at the START of the buffer (MLSL's MPI meaning). */
static void check_reduce_scatter(coll_t* c, mlsl_reduction_type rt) {
  size_t n = c->count, gn = c->grp.n, k = c->grp.k, i, bytes = n * dt_size(c->dt);
  void* send = buf_new(c->lib, bytes * gn);
  void* recv = c->in_place ? send : buf_new(c->lib, bytes);
  double* ref = ref_new(n);
  mlsl_comm_req req = 0;
  char what[64];
  snprintf(what, sizeof what, "reduce_scatter %s", rt_name(rt));
  coll_name(c, what);
  for (i = 0; i < n * gn; i++) put_at(send, c->dt, i, in_val(rank, i));
  for (i = 0; i < n; i++) ref[i] = reduce_ref(rt, &c->grp, k * n + i);
  if (OK(mlsl_distribution_reduce_scatter(c->dist, send, recv, n, c->dt, rt, c->gt, &req))) {
    complete(c, req);
    expect_elems(__LINE__, c->name, recv, c->dt, ref, n);
  }
  if (!c->in_place) buf_free(c->lib, recv);
  buf_free(c->lib, send);
  free(ref);
}

/* DT_BYTE reductions are unsigned: sums wrap modulo 256, and 200 > 100 under RT_MAX. */
void check_bytes(mlsl_distribution dist) {
  enum { N = 5 };
  unsigned char buf[N];
  double ref[N];
  size_t i;
  int g, r;
  mlsl_comm_req req = 0;
  for (r = 0; r < 2; r++) {
    mlsl_reduction_type rt = r == 0 ? RT_SUM : RT_MAX;
    for (i = 0; i < N; i++) {
      unsigned acc = 0;
      buf[i] = (unsigned char)((200 + rank * 13 + i) % 256);
      for (g = 0; g < world; g++) {
        unsigned v = (unsigned)((200 + g * 13 + i) % 256);
        acc = r == 0 ? (acc + v) % 256 : (v > acc ? v : acc);
      }
      ref[i] = acc;
    }
    if (OK(mlsl_distribution_all_reduce(dist, buf, buf, N, DT_BYTE, rt, GT_GLOBAL, &req))) {
      OK(mlsl_environment_wait(env, req));
      expect_elems(__LINE__, r == 0 ? "byte all_reduce sum" : "byte all_reduce max", buf, DT_BYTE,
                   ref, N);
    }
  }
}

void check_group_indices(mlsl_distribution dist, int d, int m) {
  int t;
  for (t = 0; t < 3; t++) {
    mlsl_group_type gt = (mlsl_group_type)t;
    group_t grp = grid_group(rank, world, d, m, gt);
    size_t idx = 99, count = 99;
    char what[64];
    if (OK(mlsl_distribution_get_process_idx(dist, gt, &idx))) {
      snprintf(what, sizeof what, "%dx%d %s group index", d, m, gt_name(gt));
      EXPECT_EQ(what, idx, grp.k);
    }
    if (OK(mlsl_distribution_get_process_count(dist, gt, &count))) {
      snprintf(what, sizeof what, "%dx%d %s group size", d, m, gt_name(gt));
      EXPECT_EQ(what, count, grp.n);
    }
  }
}

void check_collectives(mlsl_distribution dist, int d, int m) {
  static const size_t counts[2] = {1, 4099};
  static const mlsl_data_type dts[2] = {DT_FLOAT, DT_DOUBLE};
  int t, di, ci, ip;
  for (t = 0; t < 3; t++) {
    for (di = 0; di < 2; di++) {
      for (ci = 0; ci < 2; ci++) {
        for (ip = 0; ip < 2; ip++) {
          coll_t c;
          c.dist = dist;
          c.gt = (mlsl_group_type)t;
          c.grp = grid_group(rank, world, d, m, c.gt);
          c.dt = dts[di];
          c.count = counts[ci];
          c.in_place = ip;
          /* Each collective sees both buffer kinds and both ways of completing. */
          c.lib = (ip + ci + t) % 2;
          c.use_test = (ip + di + ci) % 2;
          check_bcast(&c);
          check_reduce(&c, RT_SUM);
          check_reduce(&c, RT_MIN);
          check_all_reduce(&c, RT_SUM);
          check_all_reduce(&c, RT_MIN);
          check_all_reduce(&c, RT_MAX);
          check_all_to_all(&c);
          check_all_to_allv(&c);
          check_gather(&c);
          check_all_gather(&c);
          check_all_gatherv(&c);
          check_scatter(&c);
          check_reduce_scatter(&c, RT_SUM);
          check_reduce_scatter(&c, RT_MAX);
        }
      }
    }
    OK(mlsl_distribution_barrier(dist, (mlsl_group_type)t));
  }
}

/* CreateDistributionWithColors (extension): model color g % 2 and data color g / 2 make a grid
 * transposed from CreateDistribution's (for odd worlds: one data group of everyone). Group
 * index = rank order of the global indices; an allreduce of the global ranks proves who is in
 * each group. */
void check_colors(void) {
  mlsl_distribution dist = 0;
  int even = world % 2 == 0, t, g;
  int model_color = even ? rank % 2 : rank, data_color = even ? rank / 2 : 0;
  if (!OK(mlsl_environment_create_distribution_with_colors(env, data_color, model_color, &dist)))
    return;
  for (t = 0; t < 2; t++) {
    mlsl_group_type gt = t == 0 ? GT_DATA : GT_MODEL;
    int color = t == 0 ? data_color : model_color;
    size_t idx = 99, count = 99, expect_idx = 0, expect_count = 0;
    double sum = 0, value = (double)rank;
    mlsl_comm_req req = 0;
    for (g = 0; g < world; g++) {
      int c = t == 0 ? (even ? g / 2 : 0) : (even ? g % 2 : g);
      if (c != color) continue;
      if (g < rank) expect_idx++;
      expect_count++;
      sum += g;
    }
    if (OK(mlsl_distribution_get_process_idx(dist, gt, &idx)))
      EXPECT_EQ(t == 0 ? "colors: data index" : "colors: model index", idx, expect_idx);
    if (OK(mlsl_distribution_get_process_count(dist, gt, &count)))
      EXPECT_EQ(t == 0 ? "colors: data size" : "colors: model size", count, expect_count);
    if (OK(mlsl_distribution_all_reduce(dist, &value, &value, 1, DT_DOUBLE, RT_SUM, gt, &req))) {
      OK(mlsl_environment_wait(env, req));
      expect_elems(__LINE__, t == 0 ? "colors: data group members" : "colors: model group members",
                   &value, DT_DOUBLE, &sum, 1);
    }
  }
  OK(mlsl_environment_delete_distribution(env, dist));
}
