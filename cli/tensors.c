/* tensors.c: host-side tensor data and timing for the subcommands that run pipelines. */
#include "cli/tensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "runtime/error.h"
#include "runtime/half.h"

recap_status cli_tensor_describe(recap_pipeline *p, size_t t, int64_t batch, cli_tensor *out) {
  recap_pipeline_info info;
  recap_tensor_info x;
  recap_status st;
  if ((st = recap_pipeline_info_get(p, &info)) != RECAP_OK ||
      (st = recap_pipeline_tensor_info_get(p, t, &x)) != RECAP_OK)
    return st;
  memset(out, 0, sizeof *out);
  out->index = t;
  out->name = x.name;
  out->role = x.role;
  out->is_output = x.is_output;
  out->dtype = x.dtype;
  out->ndim = x.ndim;
  memcpy(out->shape, x.shape, sizeof out->shape);
  out->bucket_axis = x.bucket_axis;
  out->init = x.init;
  int64_t largest = info.bucket_values[info.num_buckets - 1];
  if (x.bucket_axis >= 0 && batch > 0 && largest > 0) {
    /* A reshape may fold the batch into a wider axis ([B * S, D]): keep its multiple. */
    out->shape[x.bucket_axis] = x.shape[x.bucket_axis] / largest * batch;
    out->rows = batch;
  }
  uint64_t numel = 1;
  for (int d = 0; d < out->ndim; d++) numel *= (uint64_t)out->shape[d];
  out->bytes = (size_t)(numel * recap_dtype_size(out->dtype));
  return RECAP_OK;
}

typedef enum { INPUTS, BOUND_INPUTS, OUTPUTS, STATES_AND_SCALARS } tensor_set;

static bool in_set(const recap_tensor_info *t, tensor_set which) {
  switch (which) {
    case INPUTS:
      return t->role == RECAP_ROLE_INPUT;
    case BOUND_INPUTS:
      return t->role == RECAP_ROLE_INPUT && !cli_init_is_random(&t->init);
    case OUTPUTS:
      return t->is_output;
    case STATES_AND_SCALARS:
      break;
  }
  return t->role == RECAP_ROLE_STATE || t->role == RECAP_ROLE_SCALAR;
}

static int by_output_position(const void *a, const void *b) {
  const cli_host_tensor *x = a, *y = b;
  return (x->info.is_output > y->info.is_output) - (x->info.is_output < y->info.is_output);
}

/* Allocates host memory for the pipeline's tensors in `which`, shaped for `batch`. */
static recap_status collect(recap_pipeline *p, int64_t batch, tensor_set which,
                            cli_host_tensors *out) {
  recap_pipeline_info info;
  recap_tensor_info x;
  recap_status st = recap_pipeline_info_get(p, &info);
  size_t n = 0;
  for (size_t t = 0; st == RECAP_OK && t < info.num_tensors; t++)
    if ((st = recap_pipeline_tensor_info_get(p, t, &x)) == RECAP_OK) n += in_set(&x, which);
  if (st != RECAP_OK) return st;
  cli_host_tensors set = {calloc(n ? n : 1, sizeof *set.items), 0};
  if (!set.items) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu tensors", n);
  for (size_t t = 0; st == RECAP_OK && t < info.num_tensors; t++) {
    if ((st = recap_pipeline_tensor_info_get(p, t, &x)) != RECAP_OK || !in_set(&x, which)) continue;
    cli_host_tensor *h = &set.items[set.count++];
    if ((st = cli_tensor_describe(p, t, batch, &h->info)) == RECAP_OK &&
        !(h->host = malloc(h->info.bytes ? h->info.bytes : 1)))
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for tensor '%s' (%zu bytes)",
                      x.name, h->info.bytes);
  }
  if (st != RECAP_OK) {
    cli_host_tensors_free(&set);
    return st;
  }
  /* Outputs in the order the spec lists them (the tensors come in declaration order). */
  if (which == OUTPUTS) qsort(set.items, set.count, sizeof *set.items, by_output_position);
  *out = set;
  return RECAP_OK;
}

bool cli_init_is_random(const recap_tensor_init *init) {
  return init->kind == RECAP_INIT_NORMAL || init->kind == RECAP_INIT_UNIFORM;
}

const char *cli_init_describe(const recap_tensor_init *init, char *buf, size_t size) {
  switch (init->kind) {
    case RECAP_INIT_NONE:
    case RECAP_INIT_ZEROS:
      snprintf(buf, size, "zeros");
      break;
    case RECAP_INIT_ONES:
      snprintf(buf, size, "ones");
      break;
    case RECAP_INIT_NORMAL:
      snprintf(buf, size, "normal (mean %g, std %g)", init->mean, init->std);
      break;
    case RECAP_INIT_UNIFORM:
      snprintf(buf, size, "uniform [%g, %g)", init->low, init->high);
      break;
    case RECAP_INIT_FILE:
      snprintf(buf, size, "file %s%s%s", init->path ? init->path : "?", init->key ? ", key " : "",
               init->key ? init->key : "");
      break;
    case RECAP_INIT_VALUE:
      snprintf(buf, size, "value %g", init->value);
      break;
  }
  return buf;
}

recap_status cli_inputs_read_bound(recap_pipeline *p, cli_host_tensors *out) {
  recap_status st = collect(p, 0, BOUND_INPUTS, out);
  for (size_t i = 0; st == RECAP_OK && i < out->count; i++) {
    cli_host_tensor *h = &out->items[i];
    st = recap_pipeline_copy_out(p, h->info.name, h->host, h->info.bytes, 0);
  }
  if (st != RECAP_OK) cli_host_tensors_free(out);
  return st;
}

/* A uniform double in [0, 1) from the top 53 bits. */
static double rng_unit(uint64_t *state) {
  return (double)(cli_rng_next(state) >> 11) * 0x1p-53;
}

/* Fills `count` elements of a float dtype from a normal or uniform init, rounded to the
 * dtype once. Normal values come from Box-Muller, one value per pair of draws. */
static void fill_random(void *host, recap_dtype dtype, size_t count, const recap_tensor_init *init,
                        uint64_t *state) {
  for (size_t i = 0; i < count; i++) {
    double v;
    if (init->kind == RECAP_INIT_NORMAL) {
      double u1 = 1.0 - rng_unit(state), u2 = rng_unit(state); /* u1 in (0, 1]: log is finite */
      v = init->mean + init->std * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    } else {
      v = init->low + (init->high - init->low) * rng_unit(state);
    }
    recap__store_f32(host, dtype, (int64_t)i, (float)v);
  }
}

/* The first `dst->rows` rows of `src` (a whole tensor, the largest bucket) along its bucketed
 * axis, in dst's layout; the whole tensor when it has no bucketed axis. */
static void take_rows(const cli_host_tensor *src, cli_host_tensor *dst) {
  const cli_tensor *x = &src->info;
  if (dst->info.rows == 0 || x->bucket_axis < 0) {
    memcpy(dst->host, src->host, dst->info.bytes);
    return;
  }
  int a = x->bucket_axis;
  size_t outer = 1, inner = recap_dtype_size(x->dtype);
  for (int d = 0; d < a; d++) outer *= (size_t)x->shape[d];
  for (int d = a + 1; d < x->ndim; d++) inner *= (size_t)x->shape[d];
  size_t want = (size_t)dst->info.shape[a] * inner, have = (size_t)x->shape[a] * inner;
  for (size_t o = 0; o < outer; o++)
    memcpy((char *)dst->host + o * want, (const char *)src->host + o * have, want);
}

recap_status cli_inputs_make(recap_pipeline *p, const cli_host_tensors *bound, int64_t batch,
                             uint64_t seed, cli_host_tensors *out) {
  recap_status st = collect(p, batch, INPUTS, out);
  if (st != RECAP_OK) return st;
  uint64_t rng = seed;
  for (size_t i = 0; i < out->count; i++) {
    cli_host_tensor *h = &out->items[i];
    if (cli_init_is_random(&h->info.init)) {
      fill_random(h->host, h->info.dtype, h->info.bytes / recap_dtype_size(h->info.dtype),
                  &h->info.init, &rng);
      continue;
    }
    const cli_host_tensor *src = NULL;
    for (size_t k = 0; k < bound->count && !src; k++)
      if (bound->items[k].info.index == h->info.index) src = &bound->items[k];
    if (!src) {
      cli_host_tensors_free(out);
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "input '%s' has no bound contents (cli_inputs_read_bound)", h->info.name);
    }
    take_rows(src, h);
  }
  return RECAP_OK;
}

recap_status cli_inputs_copy_in(recap_pipeline *p, const cli_host_tensors *inputs) {
  for (size_t i = 0; i < inputs->count; i++) {
    const cli_host_tensor *h = &inputs->items[i];
    recap_status st = recap_pipeline_copy_in(p, h->info.name, h->host, h->info.bytes, h->info.rows);
    if (st != RECAP_OK) return st;
  }
  return RECAP_OK;
}

static recap_status copy_out_set(recap_pipeline *p, int64_t batch, tensor_set which,
                                 cli_host_tensors *out) {
  recap_status st = collect(p, batch, which, out);
  if (st != RECAP_OK) return st;
  for (size_t i = 0; i < out->count; i++) {
    cli_host_tensor *h = &out->items[i];
    if ((st = recap_pipeline_copy_out(p, h->info.name, h->host, h->info.bytes, h->info.rows)) !=
        RECAP_OK) {
      cli_host_tensors_free(out);
      return st;
    }
  }
  return RECAP_OK;
}

recap_status cli_outputs_copy_out(recap_pipeline *p, int64_t batch, cli_host_tensors *out) {
  return copy_out_set(p, batch, OUTPUTS, out);
}

recap_status cli_states_copy_out(recap_pipeline *p, int64_t batch, cli_host_tensors *out) {
  return copy_out_set(p, batch, STATES_AND_SCALARS, out);
}

void cli_host_tensors_free(cli_host_tensors *set) {
  for (size_t i = 0; i < set->count; i++) free(set->items[i].host);
  free(set->items);
  set->items = NULL;
  set->count = 0;
}

uint64_t cli_random_seed(void) {
  uint64_t seed = 0;
  if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
}

uint64_t cli_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

double cli_value(const void *host, recap_dtype dtype, size_t i) {
  return (double)recap__load_f32(host, dtype, (int64_t)i);
}

void cli_checksum(const void *host, recap_dtype dtype, size_t count, double *sum, double *abs_sum,
                  size_t *nonfinite) {
  double s = 0, a = 0;
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    double v = cli_value(host, dtype, i);
    s += v;
    a += fabs(v);
    bad += !isfinite(v);
  }
  *sum = s;
  *abs_sum = a;
  *nonfinite = bad;
}

size_t cli_compare(const void *got, const void *want, recap_dtype dtype, size_t count,
                   double *max_abs) {
  double atol = 0, rtol = 0;
  switch (dtype) {
    case RECAP_DTYPE_F32:
      atol = 1e-5, rtol = 1e-4;
      break;
    case RECAP_DTYPE_F16:
      atol = 1e-3, rtol = 1e-2;
      break;
    case RECAP_DTYPE_BF16:
      atol = 1e-2, rtol = 2e-2;
      break;
    default:
      break;
  }
  size_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < count; i++) {
    double g = cli_value(got, dtype, i), w = cli_value(want, dtype, i);
    if (isnan(g) || isnan(w)) {
      if (!(isnan(g) && isnan(w))) bad++;
      continue;
    }
    double d = fabs(g - w);
    if (d > worst) worst = d;
    if (d > atol + rtol * fabs(w)) bad++;
  }
  *max_abs = worst;
  return bad;
}

recap_status cli_read_device(recap_pipeline *p, const void *device, void *host, size_t bytes) {
  recap_stream *s = recap_pipeline_stream(p);
  /* Ordered after the runs on the pipeline's stream. */
  recap_status st = recap_memcpy_async(host, device, bytes, s);
  if (st != RECAP_OK) return st;
  return recap_stream_synchronize(s);
}

recap_status cli_time_runs(recap_pipeline *p, int64_t batch, int iters, double *ms) {
  recap_stream *s = recap_pipeline_stream(p);
  recap_event *start = NULL, *end = NULL;
  recap_status st;
  recap_device device = recap_stream_device(s);
  if ((st = recap_event_create(device, RECAP_EVENT_TIMING, &start)) != RECAP_OK) goto fail;
  if ((st = recap_event_create(device, RECAP_EVENT_TIMING, &end)) != RECAP_OK) goto fail;
  for (int i = 0; i < iters; i++) {
    if ((st = recap_event_record(start, s)) != RECAP_OK) goto fail;
    if ((st = recap_pipeline_run_async(p, batch, NULL)) != RECAP_OK) goto fail;
    if ((st = recap_event_record(end, s)) != RECAP_OK) goto fail;
    /* One run at a time: the next start is recorded on an idle stream, so an eager run's
     * launch overhead is part of its time rather than hidden behind a queue of work. */
    if ((st = recap_event_synchronize(end)) != RECAP_OK) goto fail;
    float elapsed = 0;
    if ((st = recap_event_elapsed_ms(start, end, &elapsed)) != RECAP_OK) goto fail;
    ms[i] = elapsed;
  }
fail:
  recap_event_destroy(end);
  recap_event_destroy(start);
  return st;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(const double *sorted, int n, double q) {
  double pos = q * (n - 1);
  int lo = (int)pos;
  if (lo >= n - 1) return sorted[n - 1];
  return sorted[lo] + (pos - lo) * (sorted[lo + 1] - sorted[lo]);
}

void cli_summarize(const double *values, int n, cli_summary *out) {
  memset(out, 0, sizeof *out);
  double *sorted = malloc((size_t)n * sizeof *sorted);
  if (n <= 0 || !sorted) {
    free(sorted);
    return;
  }
  memcpy(sorted, values, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
  double sum = 0;
  for (int i = 0; i < n; i++) sum += sorted[i];
  out->median = percentile(sorted, n, 0.5);
  out->p10 = percentile(sorted, n, 0.1);
  out->p90 = percentile(sorted, n, 0.9);
  out->p99 = percentile(sorted, n, 0.99);
  out->mean = sum / n;
  out->min = sorted[0];
  out->max = sorted[n - 1];
  free(sorted);
}
