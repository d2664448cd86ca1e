/* Host time per kiln_launch (bench/deploy/runtime_h200.sh). Launches in batches of
 * BATCH (below the driver's queue depth, so the host cost is what is timed),
 * synchronising between batches; prints JSON with the median, p10 and p90 of
 * the per-launch time over the batches.
 *   runtime_launch_overhead PKG OP DTYPE D0 [D1 ...] */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln/runtime.h"

#define BATCH 200
#define BATCHES 200

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s PKG OP DTYPE D0 [D1 ...]\n", argv[0]);
    return 2;
  }
  int ndim = argc - 4;
  int64_t shape[8];
  for (int i = 0; i < ndim && i < 8; ++i) shape[i] = atoll(argv[4 + i]);
  kiln_open_options o = {0};
  o.struct_size = sizeof o;
  kiln_package* pkg = NULL;
  kiln_kernel* k = NULL;
  if (kiln_package_open(argv[1], &o, &pkg) != KILN_OK ||
      kiln_kernel_find(pkg, argv[2], shape, ndim, argv[3], &k) != KILN_OK) {
    fprintf(stderr, "%s\n", kiln_last_error());
    return 1;
  }
  int nt = kiln_kernel_num_tensors(k);
  void* t[16] = {0};
  for (int i = 0; i < nt; ++i)
    if (kiln_device_alloc(pkg, (size_t)kiln_kernel_tensor_bytes(k, i), &t[i]) != KILN_OK) {
      fprintf(stderr, "%s\n", kiln_last_error());
      return 1;
    }
  for (int i = 0; i < 100; ++i) kiln_launch(k, t, nt, NULL);
  kiln_synchronize(pkg);
  double per[BATCHES];
  for (int b = 0; b < BATCHES; ++b) {
    double t0 = now_us();
    for (int i = 0; i < BATCH; ++i)
      if (kiln_launch(k, t, nt, NULL) != KILN_OK) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
      }
    per[b] = (now_us() - t0) / BATCH;
    kiln_synchronize(pkg);
  }
  qsort(per, BATCHES, sizeof per[0], cmp);
  printf("{\"what\": \"kiln_launch\", \"kernel\": \"%s\", \"device\": \"%s\", \"batch\": %d, \"batches\": %d, "
         "\"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f}\n",
         kiln_kernel_describe(k), kiln_package_target(pkg), BATCH, BATCHES, per[BATCHES / 2], per[BATCHES / 10],
         per[BATCHES * 9 / 10]);
  for (int i = 0; i < nt; ++i) kiln_device_free(pkg, t[i]);
  kiln_kernel_free(k);
  kiln_package_close(pkg);
  return 0;
}
