/*
 * mlsl_c_check: the MLSL layer through its C API (mlsl.h), docs/TESTING.md "The MLSL layer" Every
 * function of mlsl.h is called at least once with its status checked (the two nodecomm extensions
 * included):
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
 * documented group layout (docs/MLSL.md "Process groups"): model group = M consecutive ranks, data
 * group = D ranks M apart. Nothing is shared with libmlsl.
 *
 * Run under nodecomm-launch; prints "mlsl_c_check: rank R ok (N checks)" and exits 0, or
 * prints every failure and exits 1.
 *
 * The parts: this file (the environment, argument errors, main and the shared helpers of
 * mlsl_c_check.h), mlsl_c_collectives.c (the collectives) and mlsl_c_model.c (the model chain).
 */
#include "mlsl_c_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mlsl_environment env;
int rank = -1;
int world = 0;
long checks = 0;
long failures = 0;

void failf(int line, const char* fmt, ...) {
  va_list ap;
  failures++;
  fprintf(stderr, "mlsl_c_check: rank %d: FAIL (line %d): ", rank, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

int ok_(int status, const char* call, int line) {
  checks++;
  if (status != CMLSL_SUCCESS) {
    failf(line, "%s returned %d, expected CMLSL_SUCCESS", call, status);
    return 0;
  }
  return 1;
}

int refused_(int status, const char* call, int line) {
  checks++;
  if (status != CMLSL_FAILURE) {
    failf(line, "%s returned %d, expected CMLSL_FAILURE", call, status);
    return 0;
  }
  return 1;
}

/* ---- buffers of any data type ---- */

size_t dt_size(mlsl_data_type dt) {
  return dt == DT_DOUBLE ? 8 : dt == DT_FLOAT ? 4 : 1;
}

static double get_at(const void* buf, mlsl_data_type dt, size_t i) {
  if (dt == DT_FLOAT) return ((const float*)buf)[i];
  if (dt == DT_DOUBLE) return ((const double*)buf)[i];
  return ((const unsigned char*)buf)[i];
}

void put_at(void* buf, mlsl_data_type dt, size_t i, double v) {
  if (dt == DT_FLOAT)
    ((float*)buf)[i] = (float)v;
  else if (dt == DT_DOUBLE)
    ((double*)buf)[i] = v;
  else
    ((unsigned char*)buf)[i] = (unsigned char)v;
}

/* Library memory (mlsl_environment_alloc: the node's arena, zero copy) or the heap. */
void* buf_new(int lib, size_t bytes) {
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

void buf_free(int lib, void* p) {
  if (lib)
    OK(mlsl_environment_free(env, p));
  else
    free(p);
}

/* One check: every element of buf[0..n) against ref[0..n); reports the first mismatch. */
void expect_elems(int line, const char* what, const void* buf, mlsl_data_type dt, const double* ref,
                  size_t n) {
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

double* ref_new(size_t n) {
  double* r = (double*)malloc((n ? n : 1) * sizeof(double));
  if (r == NULL) {
    fprintf(stderr, "mlsl_c_check: out of memory\n");
    exit(1);
  }
  return r;
}

/* ---- the group layout (docs/MLSL.md "Process groups"), computed independently ---- */

/* CreateDistribution(D, M) over a world of P: L = D*M, l = g % L, replica base (g / L) * L;
 * model group = the M consecutive ranks of l / M, data group = the D ranks M apart. */
group_t grid_group(int g, int p, int d, int m, mlsl_group_type gt) {
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
  int version = 0, init = -1, d, m, mparts;
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
  /* The model chain on every grid the world allows: model parts 1, 2 and 4, distributed update
   * off and on, library and user buffers. */
  for (mparts = 1; mparts <= 4; mparts *= 2) {
    mlsl_distribution grid = 0;
    if (world % mparts != 0) continue;
    if (!OK(mlsl_environment_create_distribution(env, (size_t)(world / mparts), (size_t)mparts,
                                                 &grid)))
      return 1;
    run_chain(grid, world / mparts, mparts, 0, 1);
    run_chain(grid, world / mparts, mparts, 0, 0);
    run_chain(grid, world / mparts, mparts, 1, 1);
    run_chain(grid, world / mparts, mparts, 1, 0);
    OK(mlsl_environment_delete_distribution(env, grid));
  }

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