/*
 * pipeline_dist_test.c: collective ops in specs and distributed pipeline runs
 * (kernels/collective.c, engine/dist.c).
 *
 * Host suite (CI): the collective ops parse and infer (all_gather and reduce_scatter change
 * the first axis by `world`), a bad world is a spec error, and specs/tp_mlp.yaml runs on the
 * host as a world of 1, eagerly, as graphs and through recap_pipeline_run_dist; all_reduces on
 * two streams are kept off the communicator's peer buffers.
 *
 * Two-GPU suite: one process per rank, as in production. The test re-executes itself
 * (/proc/self/exe with RECAP_DIST_CHILD set) for each rank; the ranks meet through a file://
 * rendezvous in a fresh folder and write their outputs there. Checked:
 *   - the tensor-parallel MLP (fc1 split by columns, fc2 by rows, one all_reduce) of two ranks
 *     equals the single-GPU MLP with the full weights, eager and as graphs, for two buckets
 *     (rank 0 chooses them; rank 1 passes no batch at all);
 *   - an all_reduce with the RMSNorm after it folded in (bf16, one-shot kernel for the batches
 *     that fit the peer buffers, NCCL for the one that does not) gives the exact sum of both
 *     ranks' parts and its norm within bf16 rounding of a double-precision host computation,
 *     eager and as graphs, on both ranks;
 *   - when rank 1 dies after joining, rank 0's run fails with a clear error within its
 *     timeout instead of hanging.
 */
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/pipeline.h"
#include "runtime/half.h"
#include "tests/test_util.h"

extern char **environ;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- host: parsing, inference, world of 1 ---- */

static const char COLLECTIVES_SPEC[] =
    "name: coll\n"
    "device: host\n"
    "dims: {B: 4, D: 8, W: 2}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "ops:\n"
    "  - {op: all_reduce, in: x, out: a, average: true}\n"
    "  - {op: all_gather, in: a, out: g, world: W}\n"
    "  - {op: reduce_scatter, in: g, out: r, world: W}\n"
    "  - {op: broadcast, in: r, out: y, root: 1}\n"
    "outputs: [g, y]\n";

static void test_collective_ops_parse_and_infer_world_shapes(void) {
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_mode = 1, .mode = RECAP_MODE_EAGER};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(COLLECTIVES_SPEC, sizeof COLLECTIVES_SPEC - 1, "coll.yaml",
                                        &o, &p));
  recap_tensor g, y;
  CHECK_OK(recap_pipeline_tensor(p, "g", &g));
  CHECK_OK(recap_pipeline_tensor(p, "y", &y));
  CU_ASSERT_EQUAL(g.shape[0], 8); /* world 2 x 4 rows */
  CU_ASSERT_EQUAL(g.shape[1], 8);
  CU_ASSERT_EQUAL(y.shape[0], 4);
  CHECK_OK(recap_pipeline_destroy(p));
}

static void test_reduce_scatter_needs_divisible_rows(void) {
  static const char spec[] =
      "name: bad\ndevice: host\ntensors:\n  x: {shape: [5, 8], role: input}\n"
      "ops:\n  - {op: reduce_scatter, in: x, out: y, world: 2}\n";
  recap_pipeline *p = NULL;
  CHECK_STATUS(recap_pipeline_create_string(spec, sizeof spec - 1, "bad.yaml", NULL, &p),
               RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("world");
  static const char spec2[] =
      "name: bad\ndevice: host\ntensors:\n  x: {shape: [4, 8], role: input}\n"
      "ops:\n  - {op: all_gather, in: x, out: y, world: 0}\n";
  CHECK_STATUS(recap_pipeline_create_string(spec2, sizeof spec2 - 1, "bad.yaml", NULL, &p),
               RECAP_STATUS_SPEC_ERROR);
}

/* all_reduces on two streams could overlap, and the communicator's peer buffers hold one call
 * at a time: the engine keeps every all_reduce of such a pipeline on NCCL's path
 * (attrs.peer_buffers_off); on one stream they keep the one-shot path. */
static void test_all_reduces_on_two_streams_stay_off_the_peer_buffers(void) {
  static const char spec[] =
      "name: streams\ndevice: host\ndims: {B: 4, D: 8}\n"
      "tensors:\n  x: {shape: [B, D], role: input}\n  z: {shape: [B, D], role: input}\n"
      "ops:\n"
      "  - {op: all_reduce, in: x, out: a}\n"
      "  - {op: all_reduce, in: z, out: b%s}\n"
      "  - {op: add, in: [a, b], out: y}\n"
      "outputs: [y]\n";
  for (int streams = 1; streams <= 2; ++streams) {
    char yaml[512];
    snprintf(yaml, sizeof yaml, spec, streams == 2 ? ", stream: 1" : "");
    recap_pipeline *p = NULL;
    CHECK_OK(recap_pipeline_create_string(yaml, strlen(yaml), "streams.yaml", NULL, &p));
    const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
    int reduces = 0;
    for (size_t i = 0; i < ir->num_ops; ++i) {
      if (strcmp(ir->ops[i].def->name, "all_reduce") != 0) continue;
      reduces++;
      CU_ASSERT_EQUAL(ir->ops[i].attrs.peer_buffers_off, streams == 2);
    }
    CU_ASSERT_EQUAL(reduces, 2);
    CHECK_OK(recap_pipeline_destroy(p));
  }
}

static void fill(float *x, size_t n, uint64_t seed) {
  uint64_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    x[i] = (float)((double)((s * 2685821657736338717ull) >> 40) / (double)(1 << 24) - 0.5);
  }
}

static void test_tp_mlp_runs_on_host_as_world_of_one(void) {
  const recap_device host = {RECAP_BACKEND_HOST, 0};
  const char *dims[] = {"D=32", "F=64", NULL};
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = host, .dims = dims};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file("specs/tp_mlp.yaml", &o, &p));
  enum { ROWS = 5, D = 32 };
  float xf[ROWS * D];
  uint16_t x[ROWS * D], eager[ROWS * D], graph[ROWS * D], dist[ROWS * D];
  fill(xf, ROWS * D, 3);
  for (int i = 0; i < ROWS * D; ++i) {
    uint32_t bits;
    memcpy(&bits, &xf[i], 4);
    x[i] = (uint16_t)(bits >> 16); /* bf16 by truncation: any value will do */
  }
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, ROWS));
  CHECK_OK(recap_pipeline_run_eager(p, ROWS));
  CHECK_OK(recap_pipeline_copy_out(p, "y", eager, sizeof eager, ROWS));
  CHECK_OK(recap_pipeline_run(p, ROWS));
  CHECK_OK(recap_pipeline_copy_out(p, "y", graph, sizeof graph, ROWS));
  CU_ASSERT_EQUAL(memcmp(eager, graph, sizeof eager), 0);
  recap_comm *c = NULL;
  CHECK_OK(recap_comm_init_rank(host, 1, 0, NULL, 10, &c));
  CHECK_OK(recap_pipeline_run_dist(p, c, ROWS, 0));
  CHECK_OK(recap_pipeline_copy_out(p, "y", dist, sizeof dist, ROWS));
  CU_ASSERT_EQUAL(memcmp(eager, dist, sizeof eager), 0);
  CHECK_STATUS(recap_pipeline_run_dist(p, c, -1, 0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_comm_destroy(c));
  CHECK_OK(recap_pipeline_destroy(p));
}

/* ---- two GPUs: one process per rank ---- */

/* f32, so the two results agree to rounding (TF32 is off by default). Weights are states:
 * each rank loads its own slice with copy_in, and only the input x travels from rank 0. */
static const char TP_SPEC[] =
    "name: tp-test\n"
    "device: cuda\n"
    "dtype: f32\n"
    "dims: {B: [4, 16], D: 256, F: 1024}\n"
    "tensors:\n"
    "  x:  {shape: [B, D], role: input}\n"
    "  w1: {shape: [F, D], role: state}\n"
    "  b1: {shape: [F], role: state}\n"
    "  w2: {shape: [D, F], role: state}\n"
    "  b2: {shape: [D], role: state}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w1, b1], out: h, act: gelu}\n"
    "  - {op: linear, in: [h, w2], out: part}\n"
    "  - {op: all_reduce, in: part, out: sum}\n"
    "  - {op: add, in: [sum, b2], out: y}\n"
    "outputs: [y]\n";

enum { TD = 256, TF = 1024, TB = 16 };

typedef struct {
  float w1[TF * TD], b1[TF], w2[TD * TF], b2[TD], x[TB * TD], x2[TB * TD];
} tp_data;

static void make_data(tp_data *d) {
  fill(d->w1, TF * TD, 11);
  fill(d->b1, TF, 12);
  fill(d->w2, TD * TF, 13);
  fill(d->b2, TD, 14);
  fill(d->x, TB * TD, 15);
  fill(d->x2, TB * TD, 16);
}

/* Loads rank r's slice of the weights (world 2; world 1 loads everything). */
static recap_status load_slice(recap_pipeline *p, const tp_data *d, int rank, int world) {
  int f = TF / world;
  float *w2 = malloc(sizeof(float) * TD * (size_t)f);
  if (!w2) return RECAP_STATUS_OUT_OF_MEMORY;
  for (int row = 0; row < TD; ++row)
    memcpy(w2 + (size_t)row * f, d->w2 + (size_t)row * TF + (size_t)rank * f, sizeof(float) * f);
  recap_status st = recap_pipeline_copy_in(p, "w1", d->w1 + (size_t)rank * f * TD,
                                           sizeof(float) * (size_t)f * TD, 0);
  if (st == RECAP_OK)
    st = recap_pipeline_copy_in(p, "b1", d->b1 + (size_t)rank * f, sizeof(float) * f, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "w2", w2, sizeof(float) * TD * f, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "b2", d->b2, sizeof d->b2, 0);
  free(w2);
  return st;
}

static recap_status create_tp(int device, int world, recap_pipeline **out) {
  static char f_dim[32];
  snprintf(f_dim, sizeof f_dim, "F=%d", TF / world);
  const char *dims[] = {f_dim, NULL};
  recap_pipeline_options o = {.struct_size = sizeof o,
                              .override_device = 1,
                              .device = {RECAP_BACKEND_CUDA, device},
                              .dims = dims};
  return recap_pipeline_create_string(TP_SPEC, sizeof TP_SPEC - 1, "tp-test.yaml", &o, out);
}

static int write_blob(const char *dir, const char *name, const void *p, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(p, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static int read_blob(const char *dir, const char *name, void *p, size_t n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  int ok = fread(p, 1, n, f) == n;
  fclose(f);
  return ok;
}

#define CHILD_TRY(expr)                                                                    \
  do {                                                                                     \
    recap_status s_ = (expr);                                                              \
    if (s_ != RECAP_OK) {                                                                  \
      fprintf(stderr, "rank %d: %s -> %s: %s\n", rank, #expr, recap_status_name(s_),       \
              recap_last_error());                                                         \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

/* One rank of the TP check: eager and graph at batch 3 (bucket 4), then graph at batch 16
 * with new inputs. Only rank 0 names the batch and copies x in. */
static int child_tp(int rank, const char *dir) {
  static tp_data d;
  make_data(&d);
  char url[1100];
  snprintf(url, sizeof url, "file://%s/rv", dir);
  recap_comm *c = NULL;
  CHILD_TRY(recap_comm_init_rank((recap_device){RECAP_BACKEND_CUDA, rank}, 2, rank, url, 60, &c));
  recap_pipeline *p = NULL;
  CHILD_TRY(create_tp(rank, 2, &p));
  CHILD_TRY(load_slice(p, &d, rank, 2));
  static float y[TB * TD];
  if (rank == 0) CHILD_TRY(recap_pipeline_copy_in(p, "x", d.x, sizeof(float) * 3 * TD, 3));
  CHILD_TRY(recap_pipeline_run_dist(p, c, rank == 0 ? 3 : 0, RECAP_DIST_EAGER));
  CHILD_TRY(recap_pipeline_copy_out(p, "y", y, sizeof(float) * 3 * TD, 3));
  char name[64];
  snprintf(name, sizeof name, "eager3_%d", rank);
  if (!write_blob(dir, name, y, sizeof(float) * 3 * TD)) return 1;
  CHILD_TRY(recap_pipeline_run_dist(p, c, rank == 0 ? 3 : 0, 0));
  CHILD_TRY(recap_pipeline_copy_out(p, "y", y, sizeof(float) * 3 * TD, 3));
  snprintf(name, sizeof name, "graph3_%d", rank);
  if (!write_blob(dir, name, y, sizeof(float) * 3 * TD)) return 1;
  if (rank == 0) CHILD_TRY(recap_pipeline_copy_in(p, "x", d.x2, sizeof d.x2, TB));
  CHILD_TRY(recap_pipeline_run_dist(p, c, rank == 0 ? TB : 0, 0));
  CHILD_TRY(recap_pipeline_copy_out(p, "y", y, sizeof y, TB));
  snprintf(name, sizeof name, "graph16_%d", rank);
  if (!write_blob(dir, name, y, sizeof y)) return 1;
  recap_pipeline_stats stats;
  CHILD_TRY(recap_pipeline_stats_get(p, &stats));
  printf("rank %d: %llu replays, %llu eager runs, %llu captures\n", rank,
         (unsigned long long)stats.replays, (unsigned long long)stats.eager_runs,
         (unsigned long long)stats.captures);
  CHILD_TRY(recap_pipeline_destroy(p));
  CHILD_TRY(recap_comm_destroy(c));
  return stats.replays == 2 ? 0 : 1;
}

/* The one-shot all_reduce and its folded norm (kernels/collective.cu), bf16. Each rank adds
 * a bias of its own to the input from rank 0, so the sum needs both ranks' words: h = (x + b0)
 * + (x + b1), hn = rmsnorm(h, g), s = the average of hn over the ranks (= hn: the plain path
 * and average). D is odd, so each row's last word is half padding; batches 1 and 8 fit the
 * peer buffers' slot, 80 rows do not (NCCL and then the norm's own kernel). */
static const char NORM_SPEC[] =
    "name: ar-norm\n"
    "device: cuda\n"
    "dtype: bf16\n"
    "dims: {B: [1, 8, 80], D: 4095}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "  b: {shape: [D], role: state}\n"
    "  g: {shape: [D], role: state}\n"
    "ops:\n"
    "  - {op: add, in: [x, b], out: part}\n"
    "  - {op: all_reduce, in: part, out: h}\n"
    "  - {op: rmsnorm, in: [h, g], out: hn, eps: 1e-5}\n"
    "  - {op: all_reduce, in: hn, out: s, average: true}\n"
    "outputs: [h, hn, s]\n";

enum { ND = 4095, NB = 80 };
static const int norm_batches[] = {1, 8, NB};

/* n values of fill(seed) rounded to bf16, as bytes and as floats. */
static void fill_bf16(uint16_t *bits, float *values, size_t n, uint64_t seed) {
  fill(values, n, seed);
  for (size_t i = 0; i < n; ++i) {
    recap__store_f32(bits, RECAP_DTYPE_BF16, (int64_t)i, values[i]);
    values[i] = recap__load_f32(bits, RECAP_DTYPE_BF16, (int64_t)i);
  }
}

/* One rank of the norm check: for each batch, eager then graph, writing h, hn and s. */
static int child_norm(int rank, const char *dir) {
  char url[1100];
  snprintf(url, sizeof url, "file://%s/rv", dir);
  recap_comm *c = NULL;
  CHILD_TRY(recap_comm_init_rank((recap_device){RECAP_BACKEND_CUDA, rank}, 2, rank, url, 60, &c));
  recap_pipeline_options o = {.struct_size = sizeof o,
                              .override_device = 1,
                              .device = {RECAP_BACKEND_CUDA, rank}};
  recap_pipeline *p = NULL;
  CHILD_TRY(recap_pipeline_create_string(NORM_SPEC, sizeof NORM_SPEC - 1, "ar-norm.yaml", &o, &p));
  static uint16_t bits[NB * ND];
  static float values[NB * ND];
  fill_bf16(bits, values, ND, 20 + (uint64_t)rank);
  CHILD_TRY(recap_pipeline_copy_in(p, "b", bits, ND * 2, 0));
  fill_bf16(bits, values, ND, 30);
  CHILD_TRY(recap_pipeline_copy_in(p, "g", bits, ND * 2, 0));
  for (size_t k = 0; k < sizeof norm_batches / sizeof norm_batches[0]; ++k) {
    const int batch = norm_batches[k];
    const size_t bytes = (size_t)batch * ND * 2;
    for (int graph = 0; graph < 2; ++graph) {
      if (rank == 0) {
        fill_bf16(bits, values, (size_t)batch * ND, 40 + (uint64_t)batch);
        CHILD_TRY(recap_pipeline_copy_in(p, "x", bits, bytes, batch));
      }
      CHILD_TRY(recap_pipeline_run_dist(p, c, rank == 0 ? batch : 0, graph ? 0 : RECAP_DIST_EAGER));
      static const char *const outs[] = {"h", "hn", "s"};
      for (int i = 0; i < 3; ++i) {
        CHILD_TRY(recap_pipeline_copy_out(p, outs[i], bits, bytes, batch));
        char name[64];
        snprintf(name, sizeof name, "%s_%d_%d_%d", outs[i], batch, graph, rank);
        if (!write_blob(dir, name, bits, bytes)) return 1;
      }
    }
  }
  CHILD_TRY(recap_pipeline_destroy(p));
  CHILD_TRY(recap_comm_destroy(c));
  return 0;
}

/* Rank 1 joins and dies; rank 0 must fail within its timeout and say why. */
static int child_die(int rank, const char *dir) {
  char url[1100];
  snprintf(url, sizeof url, "file://%s/rv", dir);
  recap_comm *c = NULL;
  const double timeout = test_scaled_seconds(8);
  CHILD_TRY(recap_comm_init_rank((recap_device){RECAP_BACKEND_CUDA, rank}, 2, rank, url, timeout,
                                 &c));
  if (rank == 1) _exit(7); /* dies without a word, as a crashed rank does */
  static tp_data d;
  make_data(&d);
  recap_pipeline *p = NULL;
  CHILD_TRY(create_tp(0, 2, &p));
  CHILD_TRY(load_slice(p, &d, 0, 2));
  CHILD_TRY(recap_pipeline_copy_in(p, "x", d.x, sizeof d.x, TB));
  double t0 = now_s();
  recap_status st = recap_pipeline_run_dist(p, c, TB, 0);
  double elapsed = now_s() - t0;
  char report[2048];
  snprintf(report, sizeof report, "%s after %.1f s: %s", recap_status_name(st), elapsed,
           recap_last_error());
  printf("rank 0: %s\n", report);
  write_blob(dir, "die.txt", report, strlen(report));
  /* The communicator is aborted and the pipeline may hold aborted work: the process ends here
   * without teardown, as a failed rank's would. */
  fflush(stdout);
  _exit(st != RECAP_OK && elapsed < 4 * timeout ? 0 : 1);
}

/* Starts this binary as rank r of a child role; returns the pid (or -1). */
static pid_t spawn_rank(const char *role, int rank, const char *dir) {
  char value[1200];
  snprintf(value, sizeof value, "%s:%d:%s", role, rank, dir);
  setenv("RECAP_DIST_CHILD", value, 1);
  char *argv[] = {"pipeline_dist_test", NULL};
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0) pid = -1;
  unsetenv("RECAP_DIST_CHILD");
  return pid;
}

/* Waits for both ranks at most `limit` seconds (then kills them); their exit statuses. */
static void wait_ranks(pid_t pids[2], int codes[2], double limit) {
  double deadline = now_s() + limit;
  int left = 2;
  codes[0] = codes[1] = -1;
  while (left > 0) {
    int st;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < 2; ++r)
        if (pids[r] == pid) {
          codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
          left--;
        }
      continue;
    }
    if (now_s() > deadline) {
      for (int r = 0; r < 2; ++r)
        if (codes[r] < 0) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], NULL, 0);
          codes[r] = 999;
        }
      break;
    }
    usleep(20000);
  }
}

static void make_dir(char *buf, size_t size) {
  snprintf(buf, size, "%s/recap_dist_XXXXXX",
           getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(buf));
}

/* Runs both ranks of `role` in a fresh folder (dir) and checks that both exit 0 in time. */
static void run_both_ranks(const char *role, char *dir, size_t size) {
  make_dir(dir, size);
  pid_t pids[2] = {spawn_rank(role, 0, dir), spawn_rank(role, 1, dir)};
  CU_ASSERT_FATAL(pids[0] > 0 && pids[1] > 0);
  int codes[2];
  wait_ranks(pids, codes, test_scaled_seconds(180));
  CU_ASSERT_EQUAL(codes[0], 0);
  CU_ASSERT_EQUAL(codes[1], 0);
}

static size_t compare(const float *got, const float *want, size_t n, double *worst) {
  size_t bad = 0;
  *worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double err = got[i] > want[i] ? got[i] - want[i] : want[i] - got[i];
    double tol = 1e-4 + 1e-4 * (want[i] < 0 ? -want[i] : want[i]);
    if (err > *worst) *worst = err;
    bad += !(err <= tol);
  }
  return bad;
}

static void test_tp_mlp_two_ranks_equals_single_gpu(void) {
  static tp_data d;
  make_data(&d);
  /* The reference: the full MLP on one GPU, no communicator (its all_reduce is a copy). */
  static float ref3[3 * TD], ref16[TB * TD], got[TB * TD];
  recap_pipeline *p = NULL;
  CHECK_OK(create_tp(0, 1, &p));
  CHECK_OK(load_slice(p, &d, 0, 1));
  CHECK_OK(recap_pipeline_copy_in(p, "x", d.x, sizeof(float) * 3 * TD, 3));
  CHECK_OK(recap_pipeline_run(p, 3));
  CHECK_OK(recap_pipeline_copy_out(p, "y", ref3, sizeof ref3, 3));
  CHECK_OK(recap_pipeline_copy_in(p, "x", d.x2, sizeof d.x2, TB));
  CHECK_OK(recap_pipeline_run(p, TB));
  CHECK_OK(recap_pipeline_copy_out(p, "y", ref16, sizeof ref16, TB));
  CHECK_OK(recap_pipeline_destroy(p));

  char dir[512];
  run_both_ranks("tp", dir, sizeof dir);
  const char *names[] = {"eager3", "graph3", "graph16"};
  for (int k = 0; k < 3; ++k)
    for (int r = 0; r < 2; ++r) {
      char name[64];
      snprintf(name, sizeof name, "%s_%d", names[k], r);
      size_t n = k == 2 ? TB * TD : 3 * TD;
      if (!read_blob(dir, name, got, n * sizeof(float))) {
        fprintf(stderr, "\n  no output %s from rank %d\n", name, r);
        CU_FAIL("a rank wrote no output");
        continue;
      }
      double worst;
      size_t bad = compare(got, k == 2 ? ref16 : ref3, n, &worst);
      if (bad) fprintf(stderr, "\n  %s: %zu of %zu elements off (worst %.3g)\n", name, bad, n, worst);
      CU_ASSERT_EQUAL(bad, 0);
    }
}

static void test_all_reduce_and_its_norm_match_the_host_computation(void) {
  char dir[512];
  run_both_ranks("norm", dir, sizeof dir);
  static uint16_t bits[NB * ND];
  static float b[2][ND], g[ND], x[NB * ND], part[2], h[NB * ND], got[3][NB * ND];
  fill_bf16(bits, b[0], ND, 20);
  fill_bf16(bits, b[1], ND, 21);
  fill_bf16(bits, g, ND, 30);
  for (size_t k = 0; k < sizeof norm_batches / sizeof norm_batches[0]; ++k) {
    const int batch = norm_batches[k];
    const size_t n = (size_t)batch * ND;
    fill_bf16(bits, x, n, 40 + (uint64_t)batch);
    /* The sum of two bf16 values is exact in f32, so h is exact; hn in double. */
    for (size_t i = 0; i < n; ++i) {
      for (int r = 0; r < 2; ++r) {
        recap__store_f32(bits, RECAP_DTYPE_BF16, 0, x[i] + b[r][i % ND]);
        part[r] = recap__load_f32(bits, RECAP_DTYPE_BF16, 0);
      }
      recap__store_f32(bits, RECAP_DTYPE_BF16, 0, part[0] + part[1]);
      h[i] = recap__load_f32(bits, RECAP_DTYPE_BF16, 0);
    }
    for (int graph = 0; graph < 2; ++graph)
      for (int rank = 0; rank < 2; ++rank) {
        static const char *const outs[] = {"h", "hn", "s"};
        bool read = true;
        for (int i = 0; i < 3; ++i) {
          char name[64];
          snprintf(name, sizeof name, "%s_%d_%d_%d", outs[i], batch, graph, rank);
          read = read && read_blob(dir, name, bits, n * 2);
          for (size_t e = 0; read && e < n; ++e)
            got[i][e] = recap__load_f32(bits, RECAP_DTYPE_BF16, (int64_t)e);
        }
        if (!read) {
          CU_FAIL("a rank wrote no output");
          continue;
        }
        size_t bad_h = 0, bad_hn = 0, bad_s = 0;
        for (int row = 0; row < batch; ++row) {
          double sq = 0;
          for (int j = 0; j < ND; ++j) sq += (double)h[row * ND + j] * h[row * ND + j];
          const double inv = 1.0 / sqrt(sq / ND + 1e-5);
          for (int j = 0; j < ND; ++j) {
            const size_t e = (size_t)row * ND + j;
            const double want = h[e] * inv * g[j];
            bad_h += got[0][e] != h[e];
            bad_hn += !(fabs(got[1][e] - want) <= 1e-2 * fabs(want) + 1e-3);
            bad_s += got[2][e] != got[1][e];
          }
        }
        if (bad_h || bad_hn || bad_s)
          fprintf(stderr, "\n  batch %d, %s, rank %d: %zu of h, %zu of hn, %zu of s off\n", batch,
                  graph ? "graph" : "eager", rank, bad_h, bad_hn, bad_s);
        CU_ASSERT_EQUAL(bad_h + bad_hn + bad_s, 0);
      }
  }
}

static void test_dead_rank_fails_the_others_within_timeout(void) {
  char dir[512];
  make_dir(dir, sizeof dir);
  double t0 = now_s();
  pid_t pids[2] = {spawn_rank("die", 0, dir), spawn_rank("die", 1, dir)};
  CU_ASSERT_FATAL(pids[0] > 0 && pids[1] > 0);
  int codes[2];
  const double deadline = test_scaled_seconds(120);
  wait_ranks(pids, codes, deadline);
  double elapsed = now_s() - t0;
  char report[2048] = "";
  read_blob(dir, "die.txt", report, sizeof report - 1); /* short reads leave it NUL-ended */
  fprintf(stderr, "\n  dead-rank run (%.1f s, exits %d %d): %s\n", elapsed, codes[0], codes[1],
          report);
  /* Three outcomes told apart: a rank killed at the deadline hung (999); rank 1 exiting with
   * anything but 7 never joined (its init failed: too slow for the timeout, see its output);
   * rank 0 exiting 1 ran on, or failed only after 4 timeouts. */
  for (int r = 0; r < 2; ++r)
    if (codes[r] == 999) fprintf(stderr, "  rank %d hung: killed after %.0f s\n", r, deadline);
  if (codes[1] != 7 && codes[1] != 999)
    fprintf(stderr, "  rank 1 exited %d before dying on purpose: it never joined\n", codes[1]);
  CU_ASSERT_EQUAL(codes[1], 7);
  CU_ASSERT_EQUAL(codes[0], 0); /* rank 0 saw an error, in time */
  CU_ASSERT(strstr(report, "RECAP_STATUS_") != NULL && strstr(report, "RECAP_STATUS_OK ") == NULL);
}

/* Kernels launch on the current device, and nothing made the pipeline's device current: a
 * pipeline on cuda:1 run eagerly from a thread where cuda:0 is current (as in a rank that sees
 * every GPU) launched its kernels to the wrong device. Both devices' results must agree. */
static void test_pipeline_on_second_gpu_runs_eagerly_while_first_is_current(void) {
  static const char spec[] =
      "name: second-gpu\ndevice: cuda\ndtype: f32\nseed: 3\n"
      "tensors:\n  x: {shape: [64, 256], role: input}\n"
      "  w: {shape: [128, 256], role: param, init: normal, std: 0.05}\n"
      "ops:\n  - {op: linear, in: [x, w], out: h}\n  - {op: gelu, in: h, out: g}\n"
      "  - {op: softmax, in: g, out: y}\noutputs: [y]\n";
  static float x[64 * 256], want[64 * 128], got[64 * 128];
  fill(x, 64 * 256, 5);
  float *outs[2] = {want, got};
  for (int dev = 0; dev < 2; ++dev) {
    recap_pipeline_options o = {.struct_size = sizeof o,
                                .override_device = 1,
                                .device = {RECAP_BACKEND_CUDA, dev},
                                .override_mode = 1,
                                .mode = RECAP_MODE_EAGER};
    recap_pipeline *p = NULL;
    CHECK_OK(recap_pipeline_create_string(spec, sizeof spec - 1, "second-gpu.yaml", &o, &p));
    if (!p) return;
    CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, 0));
    CHECK_OK(recap_pipeline_run(p, 0));
    CHECK_OK(recap_pipeline_copy_out(p, "y", outs[dev], sizeof got, 0));
    CHECK_OK(recap_pipeline_destroy(p));
  }
  double worst;
  CU_ASSERT_EQUAL(compare(got, want, 64 * 128, &worst), 0);
}

static int child_main(const char *spec) {
  char role[16];
  int rank = -1, n = 0;
  if (sscanf(spec, "%15[^:]:%d:%n", role, &rank, &n) != 2 || n == 0) return 2;
  const char *dir = spec + n;
  if (strcmp(role, "tp") == 0) return child_tp(rank, dir);
  if (strcmp(role, "die") == 0) return child_die(rank, dir);
  if (strcmp(role, "norm") == 0) return child_norm(rank, dir);
  return 2;
}

int main(void) {
  const char *child = getenv("RECAP_DIST_CHILD");
  if (child) return child_main(child);
  CU_pSuite host = test_add_suite("dist/host", NULL, NULL);
  CU_ADD_TEST(host, test_collective_ops_parse_and_infer_world_shapes);
  CU_ADD_TEST(host, test_reduce_scatter_needs_divisible_rows);
  CU_ADD_TEST(host, test_all_reduces_on_two_streams_stay_off_the_peer_buffers);
  CU_ADD_TEST(host, test_tp_mlp_runs_on_host_as_world_of_one);
  int gpus = 0;
  recap_device_count(RECAP_BACKEND_CUDA, &gpus);
  CU_pSuite cuda = test_add_suite("dist/cuda2", NULL, NULL);
  if (gpus < 2) {
    CU_set_suite_active(cuda, CU_FALSE);
    printf("INACTIVE suite 'dist/cuda2': needs 2 CUDA devices, %d present; its tests did not "
           "run and are not counted as passed\n",
           gpus);
  }
  CU_ADD_TEST(cuda, test_pipeline_on_second_gpu_runs_eagerly_while_first_is_current);
  CU_ADD_TEST(cuda, test_tp_mlp_two_ranks_equals_single_gpu);
  CU_ADD_TEST(cuda, test_all_reduce_and_its_norm_match_the_host_computation);
  CU_ADD_TEST(cuda, test_dead_rank_fails_the_others_within_timeout);
  return test_run_all();
}
