/* The C twin of mlsl_consumer.cpp, written against MLSL's C API only (mlsl.h; C89): Init, one
 * allreduce over GT_GLOBAL of rank-dependent values, a check of every sum, Finalize. */
#include <mlsl.h>

#include <stdio.h>

#define CHECK(call)                                                  \
  do {                                                               \
    if ((call) != CMLSL_SUCCESS) {                                   \
      fprintf(stderr, "mlsl_consumer_c: %s failed\n", #call);        \
      return 1;                                                      \
    }                                                                \
  } while (0)

int main(int argc, char** argv) {
  mlsl_environment env;
  mlsl_distribution dist;
  mlsl_comm_req req;
  size_t rank, size, i, bad = 0;
  const size_t count = 1031;
  float* buf;
  void* mem;
  int version;

  CHECK(mlsl_environment_get_version(&version));
  if (CMLSL_MAJOR(version) != CMLSL_MAJOR_VERSION) {
    fprintf(stderr, "mlsl_consumer_c: library API %d.%d, header %d.%d\n", CMLSL_MAJOR(version),
            CMLSL_MINOR(version), CMLSL_MAJOR_VERSION, CMLSL_MINOR_VERSION);
    return 1;
  }
  CHECK(mlsl_environment_get_env(&env));
  CHECK(mlsl_environment_init(env, &argc, &argv));
  CHECK(mlsl_environment_get_process_idx(env, &rank));
  CHECK(mlsl_environment_get_process_count(env, &size));
  CHECK(mlsl_environment_create_distribution(env, size, 1, &dist));
  CHECK(mlsl_environment_alloc(env, count * sizeof(float), 64, &mem));
  buf = (float*)mem;
  for (i = 0; i < count; ++i) buf[i] = (float)((rank + 1) * (i % 7 + 1));
  CHECK(mlsl_distribution_all_reduce(dist, buf, buf, count, DT_FLOAT, RT_SUM, GT_GLOBAL, &req));
  CHECK(mlsl_environment_wait(env, req));
  for (i = 0; i < count; ++i) {
    const float want = (float)(size * (size + 1) / 2 * (i % 7 + 1));
    if (buf[i] != want && bad++ < 5)
      fprintf(stderr, "[%lu] mlsl_consumer_c: element %lu is %g, wanted %g\n",
              (unsigned long)rank, (unsigned long)i, buf[i], want);
  }
  CHECK(mlsl_environment_free(env, buf));
  CHECK(mlsl_environment_delete_distribution(env, dist));
  CHECK(mlsl_environment_finalize(env));
  if (bad != 0) return 1;
  printf("[%lu] mlsl_consumer_c: allreduce over %lu processes ok\n", (unsigned long)rank,
         (unsigned long)size);
  printf("[%lu] exited normally\n", (unsigned long)rank);
  return 0;
}
