/* Allreduce of (world rank + 1) over every rank through the C API; prints one line per rank. */
#include <nodecomm.h>
#include <stdio.h>

int main(void) {
  nc_context_t* ctx = NULL;
  if (nc_init(NULL, &ctx) != NC_OK) {
    fprintf(stderr, "consumer_c: %s\n", nc_last_error());
    return 1;
  }
  const int rank = nc_world_rank(ctx);
  const int size = nc_world_size(ctx);
  const size_t n = 4099;
  float* data = NULL;
  nc_request_t req;
  if (nc_alloc(ctx, n * sizeof(float), (void**)&data) != NC_OK) goto fail;
  for (size_t i = 0; i < n; ++i) data[i] = (float)(rank + 1);
  if (nc_allreduce(ctx, data, data, n, NC_F32, NC_SUM, NC_COMM_WORLD, NULL, &req) != NC_OK)
    goto fail;
  if (nc_wait(ctx, req) != NC_OK) goto fail;
  const float want = (float)(size * (size + 1) / 2);
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != want) {
      fprintf(stderr, "consumer_c: rank %d element %zu is %g, wanted %g\n", rank, i, data[i], want);
      return 1;
    }
  }
  printf("consumer_c rank %d of %d: allreduce ok (%g)\n", rank, size, want);
  nc_finalize(ctx);
  return 0;
fail:
  fprintf(stderr, "consumer_c: rank %d: %s\n", rank, nc_last_error());
  return 1;
}
