/*
 * mlsl_c_check: the MLSL layer through its C API (mlsl.h), plan §7.4. Every function of mlsl.h
 * is called at least once with its status checked (the two nodecomm extensions included):
 *
 *  - the environment: version, init state, process index/count, Alloc/Free alignments,
 *    quantization parameters round trip;
 *  - every Distribution collective on every group type of a (P/2)x2 distribution (Px1 for odd
 *    P), FLOAT and DOUBLE, counts 1 and 4099, out of place and in place with MLSL's in-place
 *    meanings, library and malloc'd buffers, completed by wait or by a test loop; DT_BYTE sums
 *    wrap modulo 256; a distribution made from colors;
 *  - a model chain CC -> CC with one parameter set each on the same distribution, with
 *    distributed update off and on and with library and user buffers: the forward activation
 *    (summed over the model group), the backward one, the reduced gradients (the owned part
 *    with distributed update) and the parameters after the increment;
 *  - argument errors (stale or made-up handles, NULL out-pointers, enums out of range) return
 *    CMLSL_FAILURE without ending the process.
 *
 * Every input is a small integer computed from (global rank, element index), and every result
 * is compared element by element with a reference computed here from the same formulas and the
 * documented group layout (plan §4.1): model group = M consecutive ranks, data group = D ranks M
 * apart. Nothing is shared with libmlsl.
 *
 * Run under nodecomm-launch; prints "mlsl_c_check: rank R ok (N checks)" and exits 0, or
 * prints every failure and exits 1.
 */
#include <mlsl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mlsl_environment env;
static int rank = -1;
static int world = 0;
static long checks = 0;
static long failures = 0;

static void failf(int line, const char* fmt, ...) {
  va_list ap;
  failures++;
  fprintf(stderr, "mlsl_c_check: rank %d: FAIL (line %d): ", rank, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static int ok_(int status, const char* call, int line) {
  checks++;
  if (status != CMLSL_SUCCESS) {
    failf(line, "%s returned %d, expected CMLSL_SUCCESS", call, status);
    return 0;
  }
  return 1;
}

static int refused_(int status, const char* call, int line) {
  checks++;
  if (status != CMLSL_FAILURE) {
    failf(line, "%s returned %d, expected CMLSL_FAILURE", call, status);
    return 0;
  }
  return 1;
}

/* A call that must succeed; a call that must be refused as an argument error. */
#define OK(call) ok_((call), #call, __LINE__)
#define REFUSED(call) refused_((call), #call, __LINE__)
#define EXPECT_EQ(what, got, want)                                                        \
  do {                                                                                    \
    unsigned long long got_ = (unsigned long long)(got);                                  \
    unsigned long long want_ = (unsigned long long)(want);                                \
    checks++;                                                                             \
    if (got_ != want_) failf(__LINE__, "%s: got %llu, expected %llu", what, got_, want_); \
  } while (0)
#define EXPECT(cond, ...)                      \
  do {                                         \
    checks++;                                  \
    if (!(cond)) failf(__LINE__, __VA_ARGS__); \
  } while (0)

/* ---- buffers of any data type ---- */

static size_t dt_size(mlsl_data_type dt) {
  return dt == DT_DOUBLE ? 8 : dt == DT_FLOAT ? 4 : 1;
}

static const char* dt_name(mlsl_data_type dt) {
  return dt == DT_DOUBLE ? "double" : dt == DT_FLOAT ? "float" : "byte";
}

static const char* gt_name(mlsl_group_type gt) {
  return gt == GT_DATA ? "data" : gt == GT_MODEL ? "model" : "global";
}

static const char* rt_name(mlsl_reduction_type rt) {
  return rt == RT_SUM ? "sum" : rt == RT_MIN ? "min" : "max";
}

static double get_at(const void* buf, mlsl_data_type dt, size_t i) {
  if (dt == DT_FLOAT) return ((const float*)buf)[i];
  if (dt == DT_DOUBLE) return ((const double*)buf)[i];
  return ((const unsigned char*)buf)[i];
}

static void put_at(void* buf, mlsl_data_type dt, size_t i, double v) {
  if (dt == DT_FLOAT)
    ((float*)buf)[i] = (float)v;
  else if (dt == DT_DOUBLE)
    ((double*)buf)[i] = v;
  else
    ((unsigned char*)buf)[i] = (unsigned char)v;
}

/* Library memory (mlsl_environment_alloc: the node's arena, zero copy) or the heap. */
static void* buf_new(int lib, size_t bytes) {
  void* p = NULL;
  if (bytes == 0) bytes = 1;
  if (lib) {
    if (!OK(mlsl_environment_alloc(env, bytes, 64, &p))) p = NULL;
  } else {
    p = malloc(bytes);
  }
  if (p == NULL) {
    fprintf(stderr, "mlsl_c_check: rank %d: cannot allocate %zu bytes (%s)\n", rank, bytes,
            lib ? "mlsl_environment_alloc" : "malloc");
    exit(1);
  }
  return p;
}

static void buf_free(int lib, void* p) {
  if (lib)
    OK(mlsl_environment_free(env, p));
  else
    free(p);
}

/* One check: every element of buf[0..n) against ref[0..n); reports the first mismatch. */
static void expect_elems(int line, const char* what, const void* buf, mlsl_data_type dt,
                         const double* ref, size_t n) {
  size_t i;
  checks++;
  for (i = 0; i < n; i++) {
    double got = get_at(buf, dt, i);
    if (got != ref[i]) {
      failf(line, "%s: element %zu of %zu: got %g, expected %g", what, i, n, got, ref[i]);
      return;
    }
  }
}

static double* ref_new(size_t n) {
  double* r = (double*)malloc((n ? n : 1) * sizeof(double));
  if (r == NULL) {
    fprintf(stderr, "mlsl_c_check: out of memory\n");
    exit(1);
  }
  return r;
}

/* ---- the group layout (plan §4.1), computed independently ---- */

#define MAX_GROUP 64

typedef struct {
  size_t n;              /* group size */
  size_t k;              /* this process's index in it */
  int member[MAX_GROUP]; /* global ranks by group index */
} group_t;

/* CreateDistribution(D, M) over a world of P: L = D*M, l = g % L, replica base (g / L) * L;
 * model group = the M consecutive ranks of l / M, data group = the D ranks M apart. */
static group_t grid_group(int g, int p, int d, int m, mlsl_group_type gt) {
  group_t r;
  int l = g % (d * m), base = g - l, i;
  if (gt == GT_GLOBAL) {
    r.n = (size_t)p;
    r.k = (size_t)g;
    for (i = 0; i < p; i++) r.member[i] = i;
  } else if (gt == GT_MODEL) {
    r.n = (size_t)m;
    r.k = (size_t)(l % m);
    for (i = 0; i < m; i++) r.member[i] = base + (l / m) * m + i;
  } else {
    r.n = (size_t)d;
    r.k = (size_t)(l / m);
    for (i = 0; i < d; i++) r.member[i] = base + l % m + i * m;
  }
  return r;
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
static void check_bytes(mlsl_distribution dist) {
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

static void check_group_indices(mlsl_distribution dist, int d, int m) {
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

static void check_collectives(mlsl_distribution dist, int d, int m) {
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
static void check_colors(void) {
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

/* ---- the model chain: op0 (CC) -> op1 (CC), plan §4.4-4.6 ---- */

enum { FIN0 = 4, F0 = 8, F1 = 8, F2 = 4, FM = 3, K0 = 10, KS0 = 3, K1 = 7, KS1 = 2, ITERS = 2 };

/* What producer model member m writes at global (minibatch, feature map, space): the consumer
 * must see the sum over the model group. */
static double fwd_val(size_t mb, size_t fm, size_t s, int it, size_t m) {
  return (double)(((mb * F0 + fm) * FM + s + (size_t)it * 5) % 53 + 1) * (double)(m + 1);
}

/* The gradient the consumer sends back for its input at global coordinates. */
static double bwd_val(size_t mb, size_t fm, size_t s, int it) {
  return (double)(((mb * F1 + fm) * FM + s + (size_t)it * 7) % 59 + 2);
}

/* Gradient element e (of the local, padded kernels) on the process with data index d. */
static double grad_val(size_t global_elem, size_t d) {
  return (double)(global_elem % 23 + 1 + d * 2);
}

/* Parameter element after update `it`: depends only on its global position. */
static double param_val(size_t global_elem, int it) {
  return (double)((global_elem * 5 + (size_t)it * 3) % 31 + 1);
}

typedef struct {
  mlsl_operation op;
  mlsl_activation in, out;
  mlsl_parameter_set ps;
  size_t kernels, ks; /* registered */
  mlsl_data_type pdt;
  size_t local, owned, owned_off, global_off; /* expected partition */
  void *grad, *params;                        /* local x ks elements */
  int du;
} layer_t;

typedef struct {
  int du, lib, use_test, link_next;
  int d, m;      /* distribution (D x M) */
  size_t di, mi; /* this process's data / model index */
  size_t gmb, mb, mb_off;
  mlsl_distribution dist;
  mlsl_session session;
  layer_t layer[2];
  char name[96];
} chain_t;

static void check_block_getters(const chain_t* ch, mlsl_comm_block_info b, const char* what) {
  mlsl_data_type dt = DT_BYTE;
  size_t fs = 0;
  char text[160];
  if (OK(mlsl_comm_block_info_get_data_type(b, &dt))) {
    snprintf(text, sizeof text, "%s: %s block data type", ch->name, what);
    EXPECT_EQ(text, dt, DT_FLOAT);
  }
  if (OK(mlsl_comm_block_info_get_fm_size(b, &fs))) {
    snprintf(text, sizeof text, "%s: %s block fm size", ch->name, what);
    EXPECT_EQ(text, fs, FM);
  }
}

/* Copies between a local tile ([mb][local fm][space]) and a comm buffer through the block
 * list: the only geometry a program may rely on. pack != 0: tile -> buffer. */
static void move_blocks(const chain_t* ch, mlsl_activation act, int pack, float* tile,
                        size_t local_fm, float* buf) {
  size_t nb = 0, b;
  if (!OK(pack ? mlsl_activation_get_pack_block_count(act, &nb)
               : mlsl_activation_get_unpack_block_count(act, &nb)))
    return;
  for (b = 0; b < nb; b++) {
    mlsl_comm_block_info info = 0;
    size_t mbo = 0, mbc = 0, fmo = 0, fmc = 0, fms = 0, off = 0, mb, fm, s;
    if (!OK(pack ? mlsl_activation_get_pack_block(act, b, &info)
                 : mlsl_activation_get_unpack_block(act, b, &info)))
      return;
    if (!OK(mlsl_comm_block_info_get_mb_offset(info, &mbo)) ||
        !OK(mlsl_comm_block_info_get_mb_count(info, &mbc)) ||
        !OK(mlsl_comm_block_info_get_fm_offset(info, &fmo)) ||
        !OK(mlsl_comm_block_info_get_fm_count(info, &fmc)) ||
        !OK(mlsl_comm_block_info_get_fm_size(info, &fms)) ||
        !OK(mlsl_comm_block_info_get_buf_offset(info, &off)))
      return;
    if (b == 0) check_block_getters(ch, info, pack ? "pack" : "unpack");
    EXPECT(mbo + mbc <= ch->mb && fmo + fmc <= local_fm && fms == FM,
           "%s: block %zu (mb %zu+%zu, fm %zu+%zu, size %zu) outside the %zux%zux%d tile", ch->name,
           b, mbo, mbc, fmo, fmc, fms, ch->mb, local_fm, FM);
    if (mbo + mbc > ch->mb || fmo + fmc > local_fm || fms != FM) return;
    for (mb = 0; mb < mbc; mb++) {
      for (fm = 0; fm < fmc; fm++) {
        for (s = 0; s < fms; s++) {
          float* t = &tile[((mbo + mb) * local_fm + fmo + fm) * FM + s];
          float* c = &buf[off + (mb * fmc + fm) * fms + s];
          if (pack)
            *c = *t;
          else
            *t = *c;
        }
      }
    }
  }
}

static void check_activation_getters(const chain_t* ch, mlsl_activation act, const char* what,
                                     size_t global_fm, size_t local_fm, size_t fm_off) {
  size_t v = 0;
  mlsl_data_type dt = DT_BYTE;
  char text[160];
  snprintf(text, sizeof text, "%s: %s global fm count", ch->name, what);
  if (OK(mlsl_activation_get_global_fm_count(act, &v))) EXPECT_EQ(text, v, global_fm);
  snprintf(text, sizeof text, "%s: %s local fm count", ch->name, what);
  if (OK(mlsl_activation_get_local_fm_count(act, &v))) EXPECT_EQ(text, v, local_fm);
  snprintf(text, sizeof text, "%s: %s global fm offset", ch->name, what);
  if (OK(mlsl_activation_get_global_fm_offset(act, &v))) EXPECT_EQ(text, v, fm_off);
  snprintf(text, sizeof text, "%s: %s fm size", ch->name, what);
  if (OK(mlsl_activation_get_fm_size(act, &v))) EXPECT_EQ(text, v, FM);
  snprintf(text, sizeof text, "%s: %s data type", ch->name, what);
  if (OK(mlsl_activation_get_data_type(act, &dt))) EXPECT_EQ(text, dt, DT_FLOAT);
}

static void check_param_getters(const chain_t* ch, layer_t* ly, int idx) {
  size_t v = 0;
  int flag = -1;
  mlsl_data_type dt = DT_BYTE;
  size_t local = ly->kernels / (size_t)ch->m;
  char text[160];
  ly->global_off = local * ch->mi;
  if (ly->du) {
    ly->owned = (local + (size_t)ch->d - 1) / (size_t)ch->d;
    ly->local = ly->owned * (size_t)ch->d;
    ly->owned_off = ly->owned * ch->di;
  } else {
    ly->owned = ly->local = local;
    ly->owned_off = 0;
  }
  snprintf(text, sizeof text, "%s: op%d global kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_global_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->kernels);
  snprintf(text, sizeof text, "%s: op%d global kernel offset", ch->name, idx);
  if (OK(mlsl_parameter_set_get_global_kernel_offset(ly->ps, &v)))
    EXPECT_EQ(text, v, ly->global_off);
  snprintf(text, sizeof text, "%s: op%d local kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_local_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->local);
  snprintf(text, sizeof text, "%s: op%d owned kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_owned_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->owned);
  snprintf(text, sizeof text, "%s: op%d owned kernel offset", ch->name, idx);
  if (OK(mlsl_parameter_set_get_owned_kernel_offset(ly->ps, &v))) EXPECT_EQ(text, v, ly->owned_off);
  snprintf(text, sizeof text, "%s: op%d kernel size", ch->name, idx);
  if (OK(mlsl_parameter_set_get_kernel_size(ly->ps, &v))) EXPECT_EQ(text, v, ly->ks);
  snprintf(text, sizeof text, "%s: op%d parameter data type", ch->name, idx);
  if (OK(mlsl_parameter_set_get_data_type(ly->ps, &dt))) EXPECT_EQ(text, dt, ly->pdt);
  snprintf(text, sizeof text, "%s: op%d is_distributed_update", ch->name, idx);
  if (OK(mlsl_parameter_set_is_distributed_update(ly->ps, &flag))) EXPECT_EQ(text, flag, ly->du);
}

/* Registers, links and commits the two operations. */
static int chain_build(chain_t* ch) {
  mlsl_operation_reg_info reg[2] = {0, 0};
  size_t idx = 99, v = 0;
  int i, flag = -1;
  mlsl_phase_type phase = PT_TEST;
  const char* names[2] = {"c_check_cc0", "c_check_cc1"};
  if (!OK(mlsl_environment_create_session(env, PT_TRAIN, &ch->session))) return 0;
  OK(mlsl_session_set_global_minibatch_size(ch->session, ch->gmb));
  if (OK(mlsl_session_get_global_minibatch_size(ch->session, &v)))
    EXPECT_EQ("session global minibatch", v, ch->gmb);
  if (OK(mlsl_session_get_phase_type(ch->session, &phase)))
    EXPECT_EQ("session phase", phase, PT_TRAIN);
  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    if (!OK(mlsl_session_create_operation_reg_info(ch->session, OT_CC, &reg[i]))) return 0;
    OK(mlsl_operation_reg_info_set_name(reg[i], names[i]));
    OK(mlsl_operation_reg_info_add_input(reg[i], i == 0 ? FIN0 : F1, FM, DT_FLOAT));
    OK(mlsl_operation_reg_info_add_output(reg[i], i == 0 ? F0 : F2, FM, DT_FLOAT));
    ly->kernels = i == 0 ? K0 : K1;
    ly->ks = i == 0 ? KS0 : KS1;
    ly->pdt = i == 0 ? DT_FLOAT : DT_DOUBLE;
    ly->du = ch->du;
    if (i == 0) {
      OK(mlsl_operation_reg_info_add_parameter_set(reg[i], ly->kernels, ly->ks, ly->pdt, ly->du));
      OK(mlsl_operation_reg_info_validate(reg[i], ch->dist));
      OK(mlsl_session_add_operation_with_distribution(ch->session, reg[i], ch->dist, &idx));
    } else {
      OK(mlsl_operation_reg_info_add_parameter_set_with_compress(reg[i], ly->kernels, ly->ks,
                                                                 ly->pdt, ly->du, CT_NONE));
      OK(mlsl_operation_reg_info_validate(reg[i], 0));
      OK(mlsl_session_add_operation(ch->session, reg[i], &idx));
    }
    EXPECT_EQ("operation index", idx, i);
    OK(mlsl_session_delete_operation_reg_info(ch->session, reg[i]));
    if (!OK(mlsl_session_get_operation(ch->session, (size_t)i, &ly->op))) return 0;
  }
  /* op1 got no distribution at AddOperation. */
  OK(mlsl_operation_set_distribution(ch->layer[1].op, ch->dist));
  if (OK(mlsl_session_get_operation_count(ch->session, &v))) EXPECT_EQ("operation count", v, 2);
  if (ch->link_next)
    OK(mlsl_operation_set_next(ch->layer[0].op, ch->layer[1].op, 0, 0));
  else
    OK(mlsl_operation_set_prev(ch->layer[1].op, ch->layer[0].op, 0, 0));

  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    mlsl_distribution d = 0;
    mlsl_session s = 0;
    mlsl_op_type type = OT_EVAL;
    const char* name = NULL;
    if (OK(mlsl_operation_get_distribution(ly->op, &d))) EXPECT_EQ("op distribution", d, ch->dist);
    if (OK(mlsl_operation_get_session(ly->op, &s))) EXPECT_EQ("op session", s, ch->session);
    if (OK(mlsl_operation_get_op_type(ly->op, &type))) EXPECT_EQ("op type", type, OT_CC);
    if (OK(mlsl_operation_get_name(ly->op, &name)))
      EXPECT(name != NULL && strcmp(name, names[i]) == 0, "op%d name: got \"%s\", expected \"%s\"",
             i, name ? name : "(null)", names[i]);
    if (OK(mlsl_operation_get_global_minibatch_size(ly->op, &v)))
      EXPECT_EQ("op global minibatch", v, ch->gmb);
    if (OK(mlsl_operation_get_local_minibatch_size(ly->op, &v)))
      EXPECT_EQ("op local minibatch", v, ch->mb);
    if (OK(mlsl_operation_get_global_minibatch_offset(ly->op, &v)))
      EXPECT_EQ("op minibatch offset", v, ch->mb_off);
    if (OK(mlsl_operation_get_input_count(ly->op, &v))) EXPECT_EQ("op input count", v, 1);
    if (OK(mlsl_operation_get_output_count(ly->op, &v))) EXPECT_EQ("op output count", v, 1);
    if (OK(mlsl_operation_has_parameter_sets(ly->op, &flag))) EXPECT_EQ("op has params", flag, 1);
    if (OK(mlsl_operation_get_parameter_set_count(ly->op, &v))) EXPECT_EQ("op param count", v, 1);
    if (!OK(mlsl_operation_get_input(ly->op, 0, &ly->in)) ||
        !OK(mlsl_operation_get_output(ly->op, 0, &ly->out)) ||
        !OK(mlsl_operation_get_parameter_set(ly->op, 0, &ly->ps)))
      return 0;
  }
  if (!OK(mlsl_session_commit(ch->session))) return 0;

  /* A CC output holds every feature map (partial sums); an input holds its model slice. */
  check_activation_getters(ch, ch->layer[0].in, "op0 input", FIN0, FIN0 / ch->m,
                           FIN0 / ch->m * ch->mi);
  check_activation_getters(ch, ch->layer[0].out, "op0 output", F0, F0, 0);
  check_activation_getters(ch, ch->layer[1].in, "op1 input", F1, F1 / ch->m, F1 / ch->m * ch->mi);
  check_activation_getters(ch, ch->layer[1].out, "op1 output", F2, F2, 0);
  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    size_t bytes;
    check_param_getters(ch, ly, i);
    bytes = ly->local * ly->ks * dt_size(ly->pdt);
    ly->grad = buf_new(ch->lib, bytes);
    ly->params = buf_new(ch->lib, bytes);
  }
  return 1;
}

/* The comm buffer a side sends from: the library's, or one of the same size from malloc. */
static float* send_buffer(const chain_t* ch, mlsl_activation act, void** owned) {
  void* lib_buf = NULL;
  size_t size = 0;
  *owned = NULL;
  if (!OK(mlsl_activation_get_comm_buf(act, &lib_buf)) ||
      !OK(mlsl_activation_get_comm_buf_size(act, &size)))
    return NULL;
  if (size == 0) return NULL; /* no exchange on this side */
  if (ch->lib) {
    EXPECT(lib_buf != NULL, "%s: get_comm_buf is NULL with a comm buffer of %zu bytes", ch->name,
           size);
    return (float*)lib_buf;
  }
  *owned = malloc(size);
  return (float*)*owned;
}

static void chain_forward(chain_t* ch, int it, float* out0, float* in1) {
  size_t l_in1 = F1 / ch->m, mb, fm, s, nb = 99, n, i;
  void *ret = (void*)1, *owned = NULL;
  float* buf;
  double* ref;
  char text[160];
  int k;

  /* op0's input has no producer: nothing to wait for, nothing to unpack. */
  if (OK(mlsl_activation_wait_comm(ch->layer[0].in, &ret)))
    EXPECT(ret == NULL, "%s: op0 input wait_comm returned %p, expected NULL", ch->name, ret);
  if (OK(mlsl_activation_get_unpack_block_count(ch->layer[0].in, &nb)))
    EXPECT_EQ("op0 input unpack blocks", nb, 0);

  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    size_t e, elems = ly->local * ly->ks;
    int exchanged = ly->du && ch->d > 1 && it > 0;
    ret = (void*)1;
    if (!OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret))) continue;
    snprintf(text, sizeof text, "%s it %d: op%d wait_increment_comm", ch->name, it, k);
    EXPECT(ret == (exchanged ? ly->params : NULL), "%s returned %p, expected %p", text, ret,
           exchanged ? ly->params : NULL);
    if (exchanged) {
      ref = ref_new(elems);
      for (e = 0; e < elems; e++) ref[e] = param_val(ly->global_off * ly->ks + e, it - 1);
      expect_elems(__LINE__, text, ly->params, ly->pdt, ref, elems);
      free(ref);
    }
  }

  /* op0 computes: model member m writes fwd_val * (m + 1) for every feature map. */
  for (mb = 0; mb < ch->mb; mb++)
    for (fm = 0; fm < F0; fm++)
      for (s = 0; s < FM; s++)
        out0[(mb * F0 + fm) * FM + s] = (float)fwd_val(ch->mb_off + mb, fm, s, it, ch->mi);
  buf = send_buffer(ch, ch->layer[0].out, &owned);
  if (buf != NULL) {
    move_blocks(ch, ch->layer[0].out, 1, out0, F0, buf);
    OK(mlsl_activation_start_comm(ch->layer[0].out, buf));
  }

  /* op1 unpacks its input: the sum over the model group of its slice of op0's outputs. */
  n = ch->mb * l_in1 * FM;
  for (i = 0; i < n; i++) in1[i] = -1;
  ret = NULL;
  if (OK(mlsl_activation_wait_comm(ch->layer[1].in, &ret))) {
    if (ret != NULL) {
      move_blocks(ch, ch->layer[1].in, 0, in1, l_in1, (float*)ret);
    } else {
      /* No exchange (one model part, one distribution): the program shares the tile. */
      EXPECT(ch->m == 1, "%s: op1 input wait_comm returned NULL with %d model parts", ch->name,
             ch->m);
      memcpy(in1, out0, n * sizeof(float));
    }
  }
  ref = ref_new(n);
  for (mb = 0; mb < ch->mb; mb++) {
    for (fm = 0; fm < l_in1; fm++) {
      for (s = 0; s < FM; s++) {
        size_t m;
        double sum = 0;
        for (m = 0; m < (size_t)ch->m; m++)
          sum += fwd_val(ch->mb_off + mb, l_in1 * ch->mi + fm, s, it, m);
        ref[(mb * l_in1 + fm) * FM + s] = sum;
      }
    }
  }
  snprintf(text, sizeof text, "%s it %d: op1 input after forward", ch->name, it);
  expect_elems(__LINE__, text, in1, DT_FLOAT, ref, n);
  free(ref);
  free(owned);
}

static void chain_backward(chain_t* ch, int it, float* out0, float* in1) {
  size_t l_in1 = F1 / ch->m, mb, fm, s, n, i, e;
  void *ret = (void*)1, *owned = NULL;
  float* buf;
  double* ref;
  char text[160];
  int k;

  /* op1's output has no consumer. */
  if (OK(mlsl_activation_wait_comm(ch->layer[1].out, &ret)))
    EXPECT(ret == NULL, "%s: op1 output wait_comm returned %p, expected NULL", ch->name, ret);

  /* op1 sends the gradient of its input slice back. */
  for (mb = 0; mb < ch->mb; mb++)
    for (fm = 0; fm < l_in1; fm++)
      for (s = 0; s < FM; s++)
        in1[(mb * l_in1 + fm) * FM + s] =
            (float)bwd_val(ch->mb_off + mb, l_in1 * ch->mi + fm, s, it);
  buf = send_buffer(ch, ch->layer[1].in, &owned);
  if (buf != NULL) {
    move_blocks(ch, ch->layer[1].in, 1, in1, l_in1, buf);
    OK(mlsl_activation_start_comm(ch->layer[1].in, buf));
  }

  for (k = 1; k >= 0; k--) {
    layer_t* ly = &ch->layer[k];
    size_t elems = ly->local * ly->ks;
    for (e = 0; e < elems; e++)
      put_at(ly->grad, ly->pdt, e, grad_val(ly->global_off * ly->ks + e, ch->di));
    OK(mlsl_parameter_set_start_gradient_comm(ly->ps, ly->grad));
    if (k == 1) {
      /* op0 receives the gradient of its whole output: every model member's slice. */
      n = ch->mb * F0 * FM;
      for (i = 0; i < n; i++) out0[i] = -1;
      ret = NULL;
      if (OK(mlsl_activation_wait_comm(ch->layer[0].out, &ret))) {
        if (ret != NULL)
          move_blocks(ch, ch->layer[0].out, 0, out0, F0, (float*)ret);
        else
          memcpy(out0, in1, n * sizeof(float));
      }
      ref = ref_new(n);
      for (mb = 0; mb < ch->mb; mb++)
        for (fm = 0; fm < F0; fm++)
          for (s = 0; s < FM; s++)
            ref[(mb * F0 + fm) * FM + s] = bwd_val(ch->mb_off + mb, fm, s, it);
      snprintf(text, sizeof text, "%s it %d: op0 output gradient after backward", ch->name, it);
      expect_elems(__LINE__, text, out0, DT_FLOAT, ref, n);
      free(ref);
    }
  }
  free(owned);
}

static void chain_update(chain_t* ch, int it) {
  int k;
  char text[160];
  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    size_t e, elems, start;
    void* ret = (void*)1;
    double* ref;
    snprintf(text, sizeof text, "%s it %d: op%d gradient", ch->name, it, k);
    void* tested = NULL;
    if (ch->use_test) {
      /* One check for the whole loop: the number of polls differs between ranks. */
      int done = 0;
      for (;;) {
        done = -1;
        if (mlsl_parameter_set_test_gradient_comm(ly->ps, &done, &ret) != CMLSL_SUCCESS) {
          EXPECT(0, "%s: mlsl_parameter_set_test_gradient_comm failed", text);
          break;
        }
        if (done != 0) break;
      }
      EXPECT_EQ("test_gradient_comm: is_completed as a whole int", done, 1);
      tested = ret;
    } else {
      OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret));
    }
    /* The reduced gradients: in place without distributed update, the owned part in a
     * library buffer with it, nothing when the data group is one process. */
    if (ch->d == 1) {
      EXPECT(ret == NULL, "%s: got %p, expected NULL (data group of one)", text, ret);
    } else if (!ly->du) {
      EXPECT(ret == ly->grad, "%s: got %p, expected the buffer passed (%p)", text, ret, ly->grad);
    } else {
      EXPECT(ret != NULL && ret != ly->grad, "%s: got %p, expected the library's owned-part buffer",
             text, ret);
    }
    if (ret != NULL) {
      elems = (ly->du ? ly->owned : ly->local) * ly->ks;
      start = ly->du ? ly->owned_off * ly->ks : 0;
      ref = ref_new(elems);
      for (e = 0; e < elems; e++) {
        size_t d;
        ref[e] = 0;
        for (d = 0; d < (size_t)ch->d; d++)
          ref[e] += grad_val(ly->global_off * ly->ks + start + e, d);
      }
      expect_elems(__LINE__, text, ret, ly->pdt, ref, elems);
      free(ref);
    }
    /* Waited (or tested to completion and then waited) already: a second wait returns NULL. */
    if (ch->use_test && OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret)))
      EXPECT(ret == tested,
             "%s: wait_gradient_comm after a completing test returned %p, expected "
             "%p",
             text, ret, tested);
    ret = (void*)1;
    if (OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret)))
      EXPECT(ret == NULL, "%s: second wait_gradient_comm returned %p, expected NULL", text, ret);

    /* The update: this process writes its owned kernels; the increment spreads them. */
    elems = ly->local * ly->ks;
    for (e = 0; e < elems; e++) put_at(ly->params, ly->pdt, e, -5);
    for (e = ly->owned_off * ly->ks; e < (ly->owned_off + ly->owned) * ly->ks; e++)
      put_at(ly->params, ly->pdt, e, param_val(ly->global_off * ly->ks + e, it));
    OK(mlsl_parameter_set_start_increment_comm(ly->ps, ly->params));
  }
}

static void chain_finish(chain_t* ch) {
  int k;
  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    int exchanged = ly->du && ch->d > 1;
    void* ret = (void*)1;
    char text[160];
    snprintf(text, sizeof text, "%s: op%d final wait_increment_comm", ch->name, k);
    if (OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret))) {
      EXPECT(ret == (exchanged ? ly->params : NULL), "%s returned %p, expected %p", text, ret,
             exchanged ? ly->params : NULL);
      if (exchanged) {
        size_t e, elems = ly->local * ly->ks;
        double* ref = ref_new(elems);
        for (e = 0; e < elems; e++) ref[e] = param_val(ly->global_off * ly->ks + e, ITERS - 1);
        expect_elems(__LINE__, text, ly->params, ly->pdt, ref, elems);
        free(ref);
      }
    }
    ret = (void*)1;
    if (OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret)))
      EXPECT(ret == NULL, "%s (twice) returned %p, expected NULL", text, ret);
  }
}

/* Statistics: with MLSL_STATS=1 they count; otherwise every call is a successful no-op. */
static void check_statistics(chain_t* ch, mlsl_statistics stats, int phase) {
  int enabled = -1, started = -1;
  if (!OK(mlsl_statistics_is_enabled(stats, &enabled))) return;
  EXPECT(enabled == 0 || enabled == 1, "statistics is_enabled %d is not a whole 0/1 int", enabled);
  if (phase == 0) {
    OK(mlsl_statistics_start(stats));
    if (OK(mlsl_statistics_is_started(stats, &started)) && enabled)
      EXPECT_EQ("statistics started after start", started, 1);
    return;
  }
  OK(mlsl_statistics_stop(stats));
  if (OK(mlsl_statistics_is_started(stats, &started)))
    EXPECT_EQ("statistics started after stop", started, 0);
  {
    unsigned long long cycles = 0;
    size_t size = 0, op;
    for (op = 0; op < 2; op++) {
      OK(mlsl_statistics_get_isolation_comm_cycles(stats, op, &cycles));
      OK(mlsl_statistics_get_comm_size(stats, op, &size));
      if (!enabled) EXPECT_EQ("disabled statistics comm size", size, 0);
      OK(mlsl_statistics_get_comm_cycles(stats, op, &cycles));
      OK(mlsl_statistics_get_compute_cycles(stats, op, &cycles));
    }
    OK(mlsl_statistics_get_total_isolation_comm_cycles(stats, &cycles));
    OK(mlsl_statistics_get_total_comm_size(stats, &size));
    if (enabled && (ch->m > 1 || ch->d > 1))
      EXPECT(size > 0, "%s: statistics total comm size is 0 after exchanges", ch->name);
    if (!enabled) EXPECT_EQ("disabled statistics total comm size", size, 0);
    OK(mlsl_statistics_get_total_comm_cycles(stats, &cycles));
    OK(mlsl_statistics_get_total_compute_cycles(stats, &cycles));
  }
  OK(mlsl_statistics_print(stats));
  OK(mlsl_statistics_reset(stats));
}

static void run_chain(mlsl_distribution dist, int d, int m, int du, int lib) {
  chain_t ch;
  mlsl_statistics stats = 0;
  float *out0, *in1;
  int it, k;
  size_t v = 99;
  memset(&ch, 0, sizeof ch);
  ch.du = du;
  ch.lib = lib;
  ch.use_test = lib == du; /* half the runs complete gradients with a test loop */
  ch.link_next = lib;      /* half link with set_next, half with set_prev */
  ch.d = d;
  ch.m = m;
  ch.dist = dist;
  ch.di = grid_group(rank, world, d, m, GT_DATA).k;
  ch.mi = grid_group(rank, world, d, m, GT_MODEL).k;
  ch.gmb = 2 * (size_t)d;
  ch.mb = ch.gmb / (size_t)d;
  ch.mb_off = ch.mb * ch.di;
  snprintf(ch.name, sizeof ch.name, "chain %dx%d du %d %s buffers%s", d, m, du,
           lib ? "library" : "user", ch.use_test ? " test" : "");
  if (!chain_build(&ch)) return;

  out0 = (float*)malloc(ch.mb * F0 * FM * sizeof(float));
  in1 = (float*)malloc(ch.mb * F1 * FM * sizeof(float));
  if (out0 == NULL || in1 == NULL) exit(1);
  if (OK(mlsl_session_get_stats(ch.session, &stats))) {
    if (ch.use_test) {
      /* Never started by the program: not complete and no buffer; complete when there is no
       * exchange at all. With statistics on, Commit's isolation runs started and waited the
       * exchange already, so "complete" (with no buffer) is right too. */
      int done = -1, enabled = 0;
      void* ret = (void*)1;
      OK(mlsl_statistics_is_enabled(stats, &enabled));
      if (OK(mlsl_parameter_set_test_gradient_comm(ch.layer[0].ps, &done, &ret))) {
        EXPECT(ret == NULL, "%s: test_gradient_comm before any start returned %p", ch.name, ret);
        if (enabled)
          EXPECT(done == 0 || done == 1, "%s: is_completed %d", ch.name, done);
        else
          EXPECT_EQ("test_gradient_comm before any start: completed", done, ch.d == 1 ? 1 : 0);
      }
    }
    check_statistics(&ch, stats, 0);
  }
  for (it = 0; it < ITERS; it++) {
    chain_forward(&ch, it, out0, in1);
    chain_backward(&ch, it, out0, in1);
    chain_update(&ch, it);
  }
  chain_finish(&ch);
  if (stats) check_statistics(&ch, stats, 1);

  for (k = 0; k < 2; k++) {
    buf_free(lib, ch.layer[k].grad);
    buf_free(lib, ch.layer[k].params);
  }
  free(out0);
  free(in1);
  OK(mlsl_session_remove_operations(ch.session));
  if (OK(mlsl_session_get_operation_count(ch.session, &v)))
    EXPECT_EQ("operation count after remove_operations", v, 0);
  OK(mlsl_environment_delete_session(env, ch.session));
  /* The session is gone: its handle is stale now. */
  REFUSED(mlsl_session_get_operation_count(ch.session, &v));
}

/* ---- argument errors: refused, nothing started, the process goes on ---- */

static void check_refusals(mlsl_distribution dist) {
  size_t v = 0;
  int i = 0;
  void* p = NULL;
  mlsl_comm_req req = 0;
  mlsl_session s = 0;
  float x = 1;
  REFUSED(mlsl_environment_get_env(NULL));
  REFUSED(mlsl_environment_get_version(NULL));
  REFUSED(mlsl_environment_get_process_count(env + 8, &v));
  REFUSED(mlsl_environment_get_process_count(env, NULL));
  REFUSED(mlsl_environment_is_initialized(env, NULL));
  REFUSED(mlsl_environment_alloc(env, 64, 64, NULL));
  REFUSED(mlsl_environment_create_session(env, (mlsl_phase_type)5, &s));
  REFUSED(mlsl_environment_wait(env, 0));
  REFUSED(mlsl_environment_wait(env, (mlsl_comm_req)0x1237));
  REFUSED(mlsl_environment_test(env, (mlsl_comm_req)0x1237, &i));
  REFUSED(mlsl_session_commit(0));
  REFUSED(mlsl_session_commit((mlsl_session)(uintptr_t)&x));
  REFUSED(mlsl_session_get_operation_count((mlsl_session)0x1000, &v));
  REFUSED(mlsl_operation_get_input_count((mlsl_operation)(uintptr_t)&v, &v));
  REFUSED(mlsl_activation_get_comm_buf((mlsl_activation)0x40, &p));
  REFUSED(mlsl_parameter_set_wait_gradient_comm((mlsl_parameter_set)0x40, &p));
  REFUSED(mlsl_comm_block_info_get_mb_count((mlsl_comm_block_info)0x40, &v));
  REFUSED(mlsl_statistics_start((mlsl_statistics)0x40));
  REFUSED(mlsl_distribution_get_process_count(dist, GT_DATA, NULL));
  REFUSED(mlsl_distribution_get_process_idx(dist, (mlsl_group_type)3, &v));
  REFUSED(mlsl_distribution_get_process_idx(dist + 1, GT_DATA, &v));
  REFUSED(mlsl_distribution_all_reduce(dist, &x, &x, 1, DT_FLOAT, RT_SUM, GT_GLOBAL, NULL));
  REFUSED(
      mlsl_distribution_all_reduce(dist, &x, &x, 1, (mlsl_data_type)3, RT_SUM, GT_GLOBAL, &req));
  REFUSED(mlsl_distribution_all_reduce(dist, &x, &x, 1, DT_FLOAT, (mlsl_reduction_type)-1,
                                       GT_GLOBAL, &req));
  REFUSED(mlsl_distribution_bcast(dist, &x, 1, DT_FLOAT, 0, (mlsl_group_type)7, &req));
  REFUSED(mlsl_distribution_barrier(0, GT_GLOBAL));
  REFUSED(mlsl_operation_reg_info_add_input((mlsl_operation_reg_info)0x40, 1, 1, DT_FLOAT));
  REFUSED(mlsl_environment_set_quantization_params(env, NULL));
  REFUSED(mlsl_environment_get_quantization_params(env, NULL));
  EXPECT_EQ("refused all_reduce left its buffer alone", x, 1);
}

int main(int argc, char** argv) {
  int version = 0, init = -1, d, m;
  size_t v = 0;
  mlsl_distribution dist = 0;
  mlsl_quant_params qp_handle = 1;
  struct {
    char *lib_path, *quant, *dequant, *reduce_sum;
    size_t block_size, elem_in_block;
  } qp = {(char*)"libquant_stub.so", (char*)"q", (char*)"dq", (char*)"rs", 268, 256}, *copy;
  void *a = NULL, *b = NULL;

  if (!OK(mlsl_environment_get_env(&env))) return 1;
  if (OK(mlsl_environment_get_version(&version))) {
    EXPECT_EQ("version", version, CMLSL_VERSION(CMLSL_MAJOR_VERSION, CMLSL_MINOR_VERSION));
    EXPECT_EQ("version is 1.0", version, 65536);
    EXPECT(CMLSL_VERSION_GE(version, CMLSL_VERSION(1, 0)) &&
               CMLSL_VERSION_LT(version, CMLSL_VERSION(1, 1)),
           "version %d not in [1.0, 1.1)", version);
  }
  if (OK(mlsl_environment_is_initialized(env, &init)))
    EXPECT_EQ("initialized before init", init, 0);
  OK(mlsl_environment_configure(env, NULL));
  if (!OK(mlsl_environment_init(env, &argc, &argv))) return 1;
  if (OK(mlsl_environment_is_initialized(env, &init))) EXPECT_EQ("initialized after init", init, 1);
  if (!OK(mlsl_environment_get_process_idx(env, &v))) return 1;
  rank = (int)v;
  if (!OK(mlsl_environment_get_process_count(env, &v))) return 1;
  world = (int)v;
  if (world > MAX_GROUP) {
    fprintf(stderr, "mlsl_c_check: world %d is larger than %d\n", world, MAX_GROUP);
    return 1;
  }

  /* Alloc honours the alignment asked for; the memory is usable; Free(NULL) is a no-op. */
  if (OK(mlsl_environment_alloc(env, 100, 64, &a)) &&
      OK(mlsl_environment_alloc(env, 70000, 4096, &b))) {
    EXPECT(a != NULL && (uintptr_t)a % 64 == 0, "alloc(100, 64) = %p", a);
    EXPECT(b != NULL && (uintptr_t)b % 4096 == 0, "alloc(70000, 4096) = %p", b);
    if (a) memset(a, 1, 100);
    if (b) memset(b, 2, 70000);
    OK(mlsl_environment_free(env, a));
    OK(mlsl_environment_free(env, b));
  }
  OK(mlsl_environment_free(env, NULL));

  /* Quantization parameters: none, then a deep copy of ours (mlsl.h passes the struct's
   * address cast to mlsl_quant_params*). */
  if (OK(mlsl_environment_get_quantization_params(env, &qp_handle)))
    EXPECT_EQ("quantization params before set", qp_handle, 0);
  OK(mlsl_environment_set_quantization_params(env, (mlsl_quant_params*)&qp));
  if (OK(mlsl_environment_get_quantization_params(env, &qp_handle))) {
    copy = (void*)(uintptr_t)qp_handle;
    EXPECT(copy != NULL && copy != &qp && strcmp(copy->lib_path, qp.lib_path) == 0 &&
               strcmp(copy->quant, "q") == 0 && strcmp(copy->dequant, "dq") == 0 &&
               strcmp(copy->reduce_sum, "rs") == 0 && copy->block_size == 268 &&
               copy->elem_in_block == 256,
           "quantization params copy at %p does not match what was set", (void*)copy);
  }

  /* The grid: (P/2) x 2 for an even world, P x 1 otherwise. */
  m = world % 2 == 0 ? 2 : 1;
  d = world / m;
  if (!OK(mlsl_environment_create_distribution(env, (size_t)d, (size_t)m, &dist))) return 1;
  check_group_indices(dist, d, m);
  check_refusals(dist);
  check_collectives(dist, d, m);
  check_bytes(dist);
  check_colors();
  run_chain(dist, d, m, 0, 1);
  run_chain(dist, d, m, 0, 0);
  run_chain(dist, d, m, 1, 1);
  run_chain(dist, d, m, 1, 0);

  OK(mlsl_environment_delete_distribution(env, dist));
  REFUSED(mlsl_distribution_barrier(dist, GT_GLOBAL));
  OK(mlsl_environment_finalize(env));
  if (OK(mlsl_environment_is_initialized(env, &init)))
    EXPECT_EQ("initialized after finalize", init, 0);

  if (failures) {
    fprintf(stderr, "mlsl_c_check: rank %d FAILED (%ld of %ld checks)\n", rank, failures, checks);
    return 1;
  }
  printf("mlsl_c_check: rank %d ok (%ld checks)\n", rank, checks);
  return 0;
}
