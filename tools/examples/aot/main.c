/* Runs the ahead-of-time compiled classifier (model.pbtxt, compiled by `tfxla-cluster aot` into mlp.o
 * and mlp.h) with no TensorFlow at run time: the object needs only libc, libm and libpthread.
 *
 *   ./mlp                    classify a built-in batch of two inputs and print the results
 *   ./mlp IN_DIR OUT_DIR     read IN_DIR/arg<k>.bin (raw bytes, mlp_arg_bytes[k] of them), run, write
 *                            OUT_DIR/result<k>.bin (what the tests use to compare with TensorFlow)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mlp.h"

static int read_file(const char* dir, const char* stem, int k, void* buf, int64_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, stem, k);
  FILE* f = fopen(path, "rb");
  if (!f) { perror(path); return 1; }
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  if ((int64_t)got != n) { fprintf(stderr, "%s: expected %lld bytes, got %zu\n", path, (long long)n, got); return 1; }
  return 0;
}

static int write_file(const char* dir, const char* stem, int k, const void* buf, int64_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s%d.bin", dir, stem, k);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, (size_t)n, f) != (size_t)n) { perror(path); if (f) fclose(f); return 1; }
  return fclose(f) != 0;
}

int main(int argc, char** argv) {
  if (argc != 1 && argc != 3) {
    fprintf(stderr, "usage: %s [IN_DIR OUT_DIR]\n", argv[0]);
    return 2;
  }
  /* The caller owns every buffer; the sizes come from the header's tables. */
  void* args[mlp_NUM_ARGS];
  void* results[mlp_NUM_RESULTS];
  for (int k = 0; k < mlp_NUM_ARGS; ++k) args[k] = malloc((size_t)mlp_arg_bytes[k]);
  for (int k = 0; k < mlp_NUM_RESULTS; ++k) results[k] = malloc((size_t)mlp_result_bytes[k]);

  if (argc == 3) {
    for (int k = 0; k < mlp_NUM_ARGS; ++k)
      if (read_file(argv[1], "arg", k, args[k], mlp_arg_bytes[k])) return 1;
  } else {
    float* x = args[0];  /* arg 0 "x": DT_FLOAT [2,8] */
    for (int i = 0; i < 16; ++i) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
  }

  if (mlp_run((const void* const*)args, results) != 0) {
    fprintf(stderr, "mlp_run failed\n");
    return 1;
  }

  if (argc == 3) {
    for (int k = 0; k < mlp_NUM_RESULTS; ++k)
      if (write_file(argv[2], "result", k, results[k], mlp_result_bytes[k])) return 1;
  } else {
    const float* probs = results[0];    /* result 0 "probs": DT_FLOAT [2,4] */
    const int64_t* label = results[1];  /* result 1 "label": DT_INT64 [2] */
    for (int b = 0; b < 2; ++b) {
      printf("input %d: label %lld, probs", b, (long long)label[b]);
      for (int c = 0; c < 4; ++c) printf(" %.4f", probs[b * 4 + c]);
      printf("\n");
    }
  }
  for (int k = 0; k < mlp_NUM_ARGS; ++k) free(args[k]);
  for (int k = 0; k < mlp_NUM_RESULTS; ++k) free(results[k]);
  return 0;
}
