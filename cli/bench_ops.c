/* bench_ops.c: `recap bench-ops`: single ops at large sizes against the hardware ceilings.
 *
 * Each memory-bound op (unary and binary elementwise, softmax, layernorm, rmsnorm, the copy
 * op) runs on tensors far past the L2 cache, and its achieved bandwidth (bytes it must read
 * and write over its median time) is compared with a device-to-device cudaMemcpyAsync of the
 * same tensor measured in the same run: the target is >= 80% of that. GEMMs report
 * TFLOP/s. Every sample is one launch between two device events, waited for before the next
 * launch (the method of `recap bench` and bench/peer/peer_torch_ops.py), so both sides pay the
 * same launch latency. The ops are launched one by one through the public single-op API
 * (recap_op_create, recap_op_launch), as the engine's eager mode launches them, without a
 * pipeline around them.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/tensors.h"

static const char *const CMD = "bench-ops";

enum { ROW_COLS = 4096, WARMUP = 3, MAX_GEMMS = 8 };
/* The target for memory-bound ops: this share of the copy ceiling. */
static const double TARGET_PCT = 80.0;

/* Sizes: the GPU default is 64M elements (256 MiB of f32 per tensor, five times the H100's
 * L2); the host backend gets a CI-sized smoke run. */
/* bench_ops_options' help text states these defaults: change both. */
static const long long CUDA_ELEMENTS = 64ll << 20, HOST_ELEMENTS = 1 << 16;
static const int CUDA_ITERS = 50, HOST_ITERS = 3;
static const long long CUDA_GEMMS[] = {4096, 8192}, HOST_GEMMS[] = {64, 128};

/* The help text below states these sizes and defaults (and TARGET_PCT's 80%). */
_Static_assert(ROW_COLS == 4096, "update bench-ops' help text");

static const cli_option bench_ops_options[] = {
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default: cuda when there is a GPU; the host backend runs\n"
             "a small smoke test: 65536 elements, GEMMs 64 and 128)"},
    {.flag = "--elements",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "elements per tensor (default 67108864 on CUDA; a multiple of 4096)"},
    {.flag = "--iters",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "timed launches per op (default 50 on CUDA, 3 on host)"},
    {.flag = "--gemm",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "GEMM sizes, comma-separated (default 4096,8192 on CUDA)"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes\n"
             "to stderr); it records the GPU, driver and library versions"},
    {0}};
const cli_help cli_bench_ops_help = {
    .synopsis =
        "recap bench-ops [--device cuda|host] [--elements N] [--iters N]\n"
        "                [--gemm N[,N...]] [--json FILE]",
    .description =
        "Times single ops on large tensors and compares each with the hardware ceiling measured\n"
        "in the same run: elementwise (relu, gelu, silu, add, mul), softmax, layernorm and\n"
        "rmsnorm over rows of 4096, in f32 and bf16, against a device-to-device copy of the\n"
        "same tensor (cudaMemcpyAsync); the target is >= 80% of the copy's bandwidth. Then bf16\n"
        "and f16 GEMMs N x N x N in TFLOP/s. Each sample is one launch between two device\n"
        "events, waited for before the next; the median is reported.",
    .groups = {{.options = bench_ops_options}},
};

typedef struct {
  const char *device, *json_path, *gemm_list;
  long long elements, iters;
  bool elements_set, iters_set;
} ops_args;

static int parse_args(int argc, char **argv, ops_args *a) {
  for (int i = 0; i < argc; i++) {
    const char *v;
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--gemm", &a->gemm_list)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--elements", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--elements", v, ROW_COLS, 1ll << 32, &a->elements))
        return CLI_EXIT_USAGE;
      if (a->elements % ROW_COLS != 0) {
        fprintf(stderr, "recap %s: --elements must be a multiple of %d\n", CMD, ROW_COLS);
        return CLI_EXIT_USAGE;
      }
      a->elements_set = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--iters", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--iters", v, 1, 100000, &a->iters)) return CLI_EXIT_USAGE;
      a->iters_set = true;
    } else {
      if (cli_positional(CMD, argv[i]))
        fprintf(stderr, "recap %s: takes no positional arguments (got '%s')\n", CMD, argv[i]);
      return CLI_EXIT_USAGE;
    }
  }
  return CLI_EXIT_OK;
}

/* Parses "4096,8192" into sizes[]; false (reported) on anything else. */
static bool parse_gemms(const char *text, long long *sizes, int *count) {
  *count = 0;
  const char *s = text;
  while (*s) {
    char item[32];
    size_t len = strcspn(s, ",");
    if (len == 0 || len >= sizeof item || *count == MAX_GEMMS) {
      fprintf(stderr, "recap %s: --gemm expects up to %d sizes like 4096,8192, got '%s'\n", CMD,
              MAX_GEMMS, text);
      return false;
    }
    memcpy(item, s, len);
    item[len] = '\0';
    if (!cli_parse_int(CMD, "--gemm", item, 1, 32768, &sizes[*count])) return false;
    (*count)++;
    s += len;
    if (*s == ',') s++;
  }
  if (*count == 0) {
    fprintf(stderr, "recap %s: --gemm needs at least one size\n", CMD);
    return false;
  }
  return true;
}

/* The device state every measurement shares. */
typedef struct {
  recap_device dev;
  recap_stream *stream;
  recap_event *start, *end;
  int iters;
  double *ms; /* iters samples */
} bench_ctx;

/* What is timed: an op, or (op NULL) a device-to-device memcpy. */
typedef struct {
  recap_op *op;
  void *dst;
  const void *src;
  size_t copy_bytes;
} launch_item;

static recap_status launch(bench_ctx *c, launch_item *it) {
  if (!it->op) return recap_memcpy_async(it->dst, it->src, it->copy_bytes, c->stream);
  return recap_op_launch(it->op, c->stream);
}

/* WARMUP untimed launches, then c->iters timed ones; *out summarizes them in ms. */
static recap_status time_item(bench_ctx *c, launch_item *it, cli_summary *out) {
  recap_status st;
  for (int i = 0; i < WARMUP; i++)
    if ((st = launch(c, it)) != RECAP_OK) return st;
  if ((st = recap_stream_synchronize(c->stream)) != RECAP_OK) return st;
  for (int i = 0; i < c->iters; i++) {
    if ((st = recap_event_record(c->start, c->stream)) != RECAP_OK) return st;
    if ((st = launch(c, it)) != RECAP_OK) return st;
    if ((st = recap_event_record(c->end, c->stream)) != RECAP_OK) return st;
    if ((st = recap_event_synchronize(c->end)) != RECAP_OK) return st;
    float ms = 0;
    if ((st = recap_event_elapsed_ms(c->start, c->end, &ms)) != RECAP_OK) return st;
    c->ms[i] = ms;
  }
  cli_summarize(c->ms, c->iters, out);
  return RECAP_OK;
}

static recap_tensor tensor2(void *data, recap_dtype dtype, int64_t rows, int64_t cols) {
  return (recap_tensor){
      .data = data, .dtype = dtype, .ndim = 2, .shape = {rows, cols}, .strides = {cols, 1}};
}

static recap_tensor tensor1(void *data, recap_dtype dtype, int64_t n) {
  return (recap_tensor){.data = data, .dtype = dtype, .ndim = 1, .shape = {n}, .strides = {1}};
}

/* `name` on `inputs`, output into `out` (its shape inferred), attributes at their defaults. */
static recap_status make_op(const char *name, const recap_tensor *inputs, int num_inputs, void *out,
                            recap_op **op) {
  recap_tensor output = {.data = out};
  recap_op_args args = {
      .inputs = inputs, .num_inputs = num_inputs, .outputs = &output, .num_outputs = 1};
  return recap_op_create(name, &args, op);
}

/* Fills rows x cols elements at `data` with uniform [-1, 1) numbers on the device. */
static recap_status fill_random(bench_ctx *c, void *data, recap_dtype dtype, int64_t rows,
                                int64_t cols) {
  char sizes[64];
  snprintf(sizes, sizeof sizes, "[%" PRId64 ", %" PRId64 "]", rows, cols);
  recap_op_attr attrs[] = {
      {"shape", sizes}, {"dtype", recap_dtype_name(dtype)}, {"low", "-1"}, {"high", "1"}};
  recap_tensor out = {.data = data};
  recap_op_args args = {.outputs = &out, .num_outputs = 1, .attrs = attrs, .num_attrs = 4};
  return recap_op_run("random_uniform", &args, c->stream);
}

/* One result row. */
typedef struct {
  bool smoke;            /* host backend: the targets do not apply */
  const char *op, *kind; /* kind: ceiling, bandwidth (target applies), info, gemm */
  recap_dtype dtype;
  int64_t rows, cols, m, n, k;
  double bytes, flops;
  cli_summary t;
  double gbps, tflops, pct;
} op_row;

static void print_row(const op_row *r) {
  if (strcmp(r->kind, "gemm") == 0) {
    printf("  %-10s %-5s %5" PRId64 "^3        %10.1f us  %8.1f TFLOP/s\n", r->op,
           recap_dtype_name(r->dtype), r->m, r->t.median * 1e3, r->tflops);
    return;
  }
  printf("  %-10s %-5s [%" PRId64 ", %" PRId64 "] %10.1f us  %8.1f GB/s", r->op,
         recap_dtype_name(r->dtype), r->rows, r->cols, r->t.median * 1e3, r->gbps);
  if (strcmp(r->kind, "ceiling") == 0)
    printf("  (ceiling)\n");
  else
    printf("  %5.1f%% of copy%s\n", r->pct,
           strcmp(r->kind, "bandwidth") != 0 ? ""
           : r->smoke                        ? "  (target n/a on host)"
           : r->pct >= TARGET_PCT            ? "  target met"
                                             : "  target MISSED");
}

static json_t *row_json(const op_row *r, double ceiling_gbps) {
  json_t *o = json_object();
  json_object_set_new(o, "op", json_string(r->op));
  json_object_set_new(o, "kind", json_string(r->kind));
  json_object_set_new(o, "dtype", json_string(recap_dtype_name(r->dtype)));
  json_object_set_new(o, "median_us", json_real(r->t.median * 1e3));
  json_object_set_new(o, "p10_us", json_real(r->t.p10 * 1e3));
  json_object_set_new(o, "p90_us", json_real(r->t.p90 * 1e3));
  if (strcmp(r->kind, "gemm") == 0) {
    json_object_set_new(o, "m", json_integer(r->m));
    json_object_set_new(o, "n", json_integer(r->n));
    json_object_set_new(o, "k", json_integer(r->k));
    json_object_set_new(o, "flops", json_real(r->flops));
    json_object_set_new(o, "tflops", json_real(r->tflops));
    return o;
  }
  json_t *shape = json_array();
  json_array_append_new(shape, json_integer(r->rows));
  json_array_append_new(shape, json_integer(r->cols));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "bytes", json_real(r->bytes));
  json_object_set_new(o, "gbps", json_real(r->gbps));
  json_object_set_new(o, "ceiling_gbps", json_real(ceiling_gbps));
  json_object_set_new(o, "pct_of_ceiling", json_real(r->pct));
  if (strcmp(r->kind, "bandwidth") == 0) {
    json_object_set_new(o, "target_pct", json_real(TARGET_PCT));
    json_object_set_new(o, "target_met",
                        r->smoke ? json_null() : json_boolean(r->pct >= TARGET_PCT));
  }
  return o;
}

/* The memory-bound ops of one dtype: their rows are appended to rows[*n]. */
static recap_status bench_dtype(bench_ctx *c, recap_dtype dt, int64_t elements, void *x, void *y,
                                void *z, void *w, void *b, op_row *rows, int *n, double *ceiling) {
  const size_t es = recap_dtype_size(dt);
  const int64_t R = elements / ROW_COLS, C = ROW_COLS;
  recap_status st;
  if ((st = fill_random(c, x, dt, R, C)) != RECAP_OK ||
      (st = fill_random(c, y, dt, R, C)) != RECAP_OK ||
      (st = fill_random(c, w, dt, 1, C)) != RECAP_OK ||
      (st = fill_random(c, b, dt, 1, C)) != RECAP_OK)
    return st;
  recap_tensor tx = tensor2(x, dt, R, C), ty = tensor2(y, dt, R, C);
  recap_tensor tw = tensor1(w, dt, C), tb = tensor1(b, dt, C);
  const double tensor_bytes = (double)elements * (double)es;
  struct {
    const char *op, *kind;
    int inputs; /* 1: x; 2: x, y; 3: x, w (norms: the row weights); 4: x, w, b */
    double bytes;
  } cases[] = {
      {"memcpy_d2d", "ceiling", 0, 2 * tensor_bytes},
      {"copy", "info", 1, 2 * tensor_bytes},
      {"relu", "bandwidth", 1, 2 * tensor_bytes},
      {"gelu", "bandwidth", 1, 2 * tensor_bytes},
      {"silu", "bandwidth", 1, 2 * tensor_bytes},
      {"add", "bandwidth", 2, 3 * tensor_bytes},
      {"mul", "bandwidth", 2, 3 * tensor_bytes},
      {"softmax", "bandwidth", 1, 2 * tensor_bytes},
      {"layernorm", "bandwidth", 4, 2 * tensor_bytes + 2.0 * C * es},
      {"rmsnorm", "bandwidth", 3, 2 * tensor_bytes + 1.0 * C * es},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    launch_item it = {0};
    if (cases[i].inputs == 0) {
      it.dst = z;
      it.src = x;
      it.copy_bytes = (size_t)tensor_bytes;
    } else {
      recap_tensor in[3] = {tx};
      int k = 1;
      if (cases[i].inputs == 2) in[k++] = ty;
      if (cases[i].inputs >= 3) in[k++] = tw;
      if (cases[i].inputs == 4) in[k++] = tb;
      if ((st = make_op(cases[i].op, in, k, z, &it.op)) != RECAP_OK) return st;
    }
    op_row *r = &rows[(*n)++];
    *r = (op_row){.smoke = c->dev.backend == RECAP_BACKEND_HOST,
                  .op = cases[i].op,
                  .kind = cases[i].kind,
                  .dtype = dt,
                  .rows = R,
                  .cols = C,
                  .bytes = cases[i].bytes};
    st = time_item(c, &it, &r->t);
    recap_op_destroy(it.op); /* time_item waited for its last launch */
    if (st != RECAP_OK) {
      (*n)--;
      return st;
    }
    r->gbps = r->t.median > 0 ? r->bytes / (r->t.median * 1e-3) / 1e9 : 0;
    if (cases[i].inputs == 0) *ceiling = r->gbps;
    r->pct = *ceiling > 0 ? 100.0 * r->gbps / *ceiling : 0;
    print_row(r);
    fflush(stdout);
  }
  return RECAP_OK;
}

static recap_status bench_gemm(bench_ctx *c, recap_dtype dt, int64_t size, void *a, void *bm,
                               void *out, op_row *r) {
  recap_status st;
  if ((st = fill_random(c, a, dt, size, size)) != RECAP_OK ||
      (st = fill_random(c, bm, dt, size, size)) != RECAP_OK)
    return st;
  recap_tensor in[2] = {tensor2(a, dt, size, size), tensor2(bm, dt, size, size)};
  launch_item it = {0};
  if ((st = make_op("matmul", in, 2, out, &it.op)) != RECAP_OK) return st;
  *r = (op_row){.op = "matmul",
                .kind = "gemm",
                .dtype = dt,
                .m = size,
                .n = size,
                .k = size,
                .flops = 2.0 * (double)size * (double)size * (double)size};
  st = time_item(c, &it, &r->t);
  recap_op_destroy(it.op);
  if (st != RECAP_OK) return st;
  r->tflops = r->t.median > 0 ? r->flops / (r->t.median * 1e-3) / 1e12 : 0;
  print_row(r);
  fflush(stdout);
  return RECAP_OK;
}

int cli_bench_ops_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_ops_help);
    return CLI_EXIT_OK;
  }
  ops_args a = {0};
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  rc = CLI_EXIT_FAILURE;
  bench_ctx c = {0};
  void *buf[5] = {0}; /* x, y, z (large), w, b (one row) */
  op_row rows[2 * 10 + 2 * MAX_GEMMS];
  int nrows = 0;
  json_t *root = NULL;
  recap_status st;
  if (!cli_pick_device(CMD, a.device, RECAP_BACKEND_CUDA, &c.dev)) goto done;
  bool host = c.dev.backend == RECAP_BACKEND_HOST;
  int64_t elements = a.elements_set ? a.elements : host ? HOST_ELEMENTS : CUDA_ELEMENTS;
  c.iters = a.iters_set ? (int)a.iters : host ? HOST_ITERS : CUDA_ITERS;
  long long gemms[MAX_GEMMS];
  int num_gemms = 0;
  if (a.gemm_list) {
    if (!parse_gemms(a.gemm_list, gemms, &num_gemms)) {
      rc = CLI_EXIT_USAGE;
      goto done;
    }
  } else {
    const long long *d = host ? HOST_GEMMS : CUDA_GEMMS;
    for (num_gemms = 0; num_gemms < 2; num_gemms++) gemms[num_gemms] = d[num_gemms];
  }
  long long max_gemm = 0;
  for (int i = 0; i < num_gemms; i++)
    if (gemms[i] > max_gemm) max_gemm = gemms[i];

  recap_device_properties props = {0};
  if ((st = recap_device_properties_get(c.dev, &props)) != RECAP_OK ||
      (st = recap_stream_create(c.dev, 0, RECAP_STREAM_NON_BLOCKING, &c.stream)) != RECAP_OK ||
      (st = recap_event_create(c.dev, RECAP_EVENT_TIMING, &c.start)) != RECAP_OK ||
      (st = recap_event_create(c.dev, RECAP_EVENT_TIMING, &c.end)) != RECAP_OK) {
    cli_report_failure(CMD, "setting up the device", st);
    goto done;
  }
  if (!(c.ms = malloc((size_t)c.iters * sizeof *c.ms))) {
    fprintf(stderr, "recap %s: out of memory\n", CMD);
    goto done;
  }
  /* The largest tensor: f32 elements, or a GEMM operand of the largest size in f32 terms. */
  size_t big = (size_t)elements * 4;
  size_t gemm_bytes = (size_t)(max_gemm * max_gemm) * 2;
  if (gemm_bytes > big) big = gemm_bytes;
  for (int i = 0; i < 5; i++)
    if ((st = recap_malloc(c.dev, i < 3 ? big : ROW_COLS * 4, c.stream, &buf[i])) != RECAP_OK) {
      cli_report_failure(CMD, "allocating the tensors", st);
      goto done;
    }

  printf("bench-ops on %s:%d (%s)%s\n", recap_backend_name(c.dev.backend), c.dev.index, props.name,
         host ? "\nhost backend: a CI-sized smoke run (small sizes), not a benchmark" : "");
  printf("%" PRId64
         " elements per tensor (rows of %d), %d timed %s per op after %d "
         "warmup, median of\none device event pair per launch; bandwidth = bytes read + written "
         "/ time\n",
         elements, ROW_COLS, c.iters, cli_plural(c.iters, "launch", "launches"), WARMUP);
  double ceilings[2] = {0, 0};
  const recap_dtype dtypes[2] = {RECAP_DTYPE_F32, RECAP_DTYPE_BF16};
  for (int d = 0; d < 2; d++) {
    printf("%s:\n", recap_dtype_name(dtypes[d]));
    if ((st = bench_dtype(&c, dtypes[d], elements, buf[0], buf[1], buf[2], buf[3], buf[4], rows,
                          &nrows, &ceilings[d])) != RECAP_OK) {
      cli_report_failure(CMD, "timing the memory-bound ops", st);
      goto done;
    }
  }
  printf("GEMMs (matmul, row-major A x B):\n");
  const recap_dtype gemm_dtypes[2] = {RECAP_DTYPE_BF16, RECAP_DTYPE_F16};
  for (int g = 0; g < num_gemms; g++)
    for (int d = 0; d < 2; d++)
      if ((st = bench_gemm(&c, gemm_dtypes[d], gemms[g], buf[0], buf[1], buf[2], &rows[nrows])) !=
          RECAP_OK) {
        cli_report_failure(CMD, "timing the GEMMs", st);
        goto done;
      } else {
        nrows++;
      }

  int met = 0, targets = 0;
  for (int i = 0; i < nrows; i++)
    if (strcmp(rows[i].kind, "bandwidth") == 0) {
      targets++;
      met += rows[i].pct >= TARGET_PCT;
    }
  printf("bandwidth target (>= %.0f%% of the copy): met by %d of %d ops%s\n", TARGET_PCT, met,
         targets, host ? " (host backend: not meaningful)" : "");

  if (a.json_path) {
    root = json_object();
    json_object_set_new(root, "command", json_string("bench-ops"));
    json_object_set_new(root, "device", json_string(recap_backend_name(c.dev.backend)));
    json_object_set_new(root, "device_name", json_string(props.name));
    json_object_set_new(root, "smoke", json_boolean(host));
    json_object_set_new(root, "elements", json_integer(elements));
    json_object_set_new(root, "row_cols", json_integer(ROW_COLS));
    json_object_set_new(root, "iters", json_integer(c.iters));
    json_object_set_new(root, "warmup", json_integer(WARMUP));
    json_object_set_new(root, "timing",
                        json_string("one device event pair per launch, "
                                    "waited for; median"));
    json_t *ceil = json_object();
    for (int d = 0; d < 2; d++)
      json_object_set_new(ceil, recap_dtype_name(dtypes[d]), json_real(ceilings[d]));
    json_object_set_new(root, "copy_gbps", ceil);
    json_t *ops = json_array(), *gm = json_array();
    for (int i = 0; i < nrows; i++) {
      bool is_gemm = strcmp(rows[i].kind, "gemm") == 0;
      double ceiling = rows[i].dtype == RECAP_DTYPE_F32 ? ceilings[0] : ceilings[1];
      json_array_append_new(is_gemm ? gm : ops, row_json(&rows[i], ceiling));
    }
    json_object_set_new(root, "ops", ops);
    json_object_set_new(root, "gemm", gm);
    json_t *sum = json_object();
    json_object_set_new(sum, "bandwidth_target_pct", json_real(TARGET_PCT));
    json_object_set_new(sum, "bandwidth_targets_met", json_integer(met));
    json_object_set_new(sum, "bandwidth_targets", json_integer(targets));
    json_object_set_new(root, "summary", sum);
    if (!cli_write_json(CMD, root, c.dev, a.json_path)) goto done;
  }
  rc = CLI_EXIT_OK;
done:
  json_decref(root);
  if (c.stream) recap_stream_synchronize(c.stream);
  for (int i = 0; i < 5; i++) recap_free(buf[i]);
  free(c.ms);
  recap_event_destroy(c.end);
  recap_event_destroy(c.start);
  recap_stream_destroy(c.stream);
  return rc;
}
