/*
 * bench_gemm.h: `recap bench-gemm`'s shape grid, its JSON files and the comparison with the
 * PyTorch peer (bench/peer/peer_torch_gemm.py). Plain C over jansson, no device: the host test
 * (tests/bench_gemm_test.sh) drives it through the command.
 *
 * A grid is a list of points; each point is one linear (x [M, K], weight [N, K], bias? [N],
 * activation, residual? [M, N]) with how it is timed: `chain` launches per event pair, cycling
 * over `copies` copies of every operand (so that operands that fit in the L2 cache are read
 * cold), the median of `samples` pairs. Both sides read the same grid file and lay the copies
 * out the same way (bench_gemm_layout), so they time the same memory traffic.
 *
 *   bench_gemm_grid g;
 *   bench_gemm_grid_make("full", &g);            // or bench_gemm_grid_read(path, &g)
 *   json_t *j = bench_gemm_grid_json(&g);        // the file both sides read
 *   ...
 *   bench_gemm_grid_free(&g);
 */
#ifndef RECAP_CLI_BENCH_GEMM_H
#define RECAP_CLI_BENCH_GEMM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { BENCH_GEMM_LABEL = 48 };

typedef struct {
  int id;
  char group[16];               /* "model", "epilogue" or "dtype" */
  char label[BENCH_GEMM_LABEL]; /* the (N, K) pair's model and layer, e.g. "llama3-8b.down" */
  char dtype[8];                /* "bf16", "f16" or "f32" */
  bool tf32;                    /* f32 only: TF32 tensor-core math on both sides */
  int64_t m, n, k;
  char act[16]; /* "none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh" */
  bool bias, residual;
  int chain, copies, samples;
} bench_gemm_point;

typedef struct {
  char name[32]; /* "full", "tiny" or the file it came from */
  bench_gemm_point *points;
  size_t count;
} bench_gemm_grid;

/* The built-in grids: "full" (the issue's: 14 Ms x the importer's 19 (N, K) pairs x 3
 * epilogues in bf16; every activation x bias x residual at 4 Ms on 4 pairs; f16 and f32 with
 * TF32 on and off at 4 Ms on 8 pairs) and "tiny" (a CI-sized one for the host backend). False
 * with a message for another name or no memory. */
bool bench_gemm_grid_make(const char *name, bench_gemm_grid *out);
/* Reads a grid file (bench_gemm_grid_json's format; a results file also qualifies: its points
 * carry the same fields). False with a message naming the file and the bad field. */
bool bench_gemm_grid_read(const char *path, bench_gemm_grid *out);
json_t *bench_gemm_grid_json(const bench_gemm_grid *grid);
json_t *bench_gemm_point_json(const bench_gemm_point *p);
void bench_gemm_grid_free(bench_gemm_grid *grid);

/* Bytes of one element of the point's dtype. */
size_t bench_gemm_elem_bytes(const bench_gemm_point *p);
/* Where copy c's operands lie, in bytes from the start of one buffer: each operand rounded up
 * to 256 bytes, in the order x, weight, bias, residual, out; copy c starts at c * stride. An
 * absent operand takes no room (offset -1). */
typedef struct {
  int64_t x, w, bias, residual, out, stride;
} bench_gemm_layout;
bench_gemm_layout bench_gemm_point_layout(const bench_gemm_point *p);

/* ---- comparison (bench_gemm_report.c) ---- */

/* One side's results: the points with graph_us and eager_us (per launch, median) added. */
typedef struct {
  bench_gemm_point *points;
  double *graph_us, *eager_us;
  size_t count;
  char side[16];      /* "recap" or "torch" */
  char device[96];    /* the GPU's name */
  char settings[160]; /* what the side read back (PyTorch's fp32_precision), or "" */
} bench_gemm_results;

bool bench_gemm_results_read(const char *path, bench_gemm_results *out);
void bench_gemm_results_free(bench_gemm_results *r);

/* What `--recap A1,A2 --peer B1,B2` asks: compare run pairs (Ai, Bi) point by point. A point
 * is a loss when recap's graph time exceeds PyTorch's by more than `threshold` (1.02) in every
 * pair. The table and summary use the first pair. svg/losses/json: files to write, or NULL. */
typedef struct {
  const char *const *recap_paths, *const *peer_paths;
  int pairs;
  double threshold;
  const char *svg_path, *losses_path, *json_path;
  bool quiet; /* summary only, no per-point table */
} bench_gemm_compare_request;

/* Prints the table and the summary to `out` and writes the requested files. 0 when done
 * (losses or not), 1 when a file cannot be read or written or the runs do not match. */
int bench_gemm_compare(const bench_gemm_compare_request *req, FILE *out);

#endif
