/* Launches a packaged softmax through libkilnrt (docs/runtime.md).
 *   cc -std=c11 runtime_softmax.c -Iinclude -Lbuild -lkilnrt -Wl,-rpath,$PWD/build -lm
 *   ./a.out PKG [ROWS COLS]     (a package with a softmax fp32 kernel)
 * Exit: 0 the rows sum to 1; 1 an error (message on stderr); 3 no GPU here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kiln/runtime.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s PKG [ROWS COLS]\n", argv[0]);
    return 2;
  }
  int64_t shape[2] = {64, 1000};
  if (argc >= 4) {
    shape[0] = atoll(argv[2]);
    shape[1] = atoll(argv[3]);
  }
  kiln_open_options opt = {0};
  opt.struct_size = sizeof opt;
  opt.device = 0;
  kiln_package* pkg = NULL;
  kiln_status st = kiln_package_open(argv[1], &opt, &pkg);
  if (st != KILN_OK) {
    fprintf(stderr, "open: %s\n", kiln_last_error());
    return st == KILN_E_NO_DEVICE || st == KILN_E_NO_RUNTIME ? 3 : 1;
  }
  printf("device: %s\n", kiln_package_target(pkg));

  kiln_kernel* k = NULL;
  if (kiln_kernel_find(pkg, "softmax", shape, 2, "fp32", &k) != KILN_OK) {
    fprintf(stderr, "find: %s\n", kiln_last_error());
    kiln_package_close(pkg);
    return 1;
  }
  printf("kernel: %s\n", kiln_kernel_describe(k));

  size_t n = (size_t)(shape[0] * shape[1]);
  float* host = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) host[i] = (float)((i * 7919) % 1000) / 250.0f - 2.0f;
  void* dev[2] = {NULL, NULL};
  int rc = 1;
  if (kiln_device_alloc(pkg, n * sizeof(float), &dev[0]) != KILN_OK ||
      kiln_device_alloc(pkg, n * sizeof(float), &dev[1]) != KILN_OK ||
      kiln_copy_to_device(pkg, dev[0], host, n * sizeof(float)) != KILN_OK ||
      kiln_launch(k, dev, 2, NULL /* default stream */) != KILN_OK ||
      kiln_synchronize(pkg) != KILN_OK ||
      kiln_copy_to_host(pkg, host, dev[1], n * sizeof(float)) != KILN_OK) {
    fprintf(stderr, "launch: %s\n", kiln_last_error());
  } else {
    double worst = 0;
    for (int64_t r = 0; r < shape[0]; ++r) {
      double s = 0;
      for (int64_t c = 0; c < shape[1]; ++c) s += host[r * shape[1] + c];
      if (fabs(s - 1.0) > worst) worst = fabs(s - 1.0);
    }
    printf("max |row sum - 1| = %.2e\n", worst);
    rc = worst < 1e-4 ? 0 : 1;
  }
  kiln_device_free(pkg, dev[0]);
  kiln_device_free(pkg, dev[1]);
  free(host);
  kiln_kernel_free(k);
  kiln_package_close(pkg);
  return rc;
}
