/* weight_load.c: file -> pinned staging -> device, on parallel threads (weight_load.h). */
#include "engine/weight_load.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/names.h"
#include "runtime/error.h"
#include "runtime/file.h"
#include "runtime/half.h"

/* Measured on the H100 machine (16 cores, 2.6 GB bf16 in 4 shards, warm page cache; best of 3
 * against 55 GB/s pinned): 8 threads x 16 MiB reached 0.41-0.49 of the pinned bandwidth, 16 x 16
 * MiB 0.71, 16 x 4 MiB 0.77-0.80, 16 x 2 MiB 0.78, 24 x 4 MiB 0.78. Reading from the page cache
 * is the bound, so every core reads, and small chunks keep each thread's copy overlapping its
 * next read. */
enum { DEFAULT_CHUNK = 4 << 20, MIN_CHUNK = 64 << 10, MAX_THREADS = 16, SLOTS = 2 };

/* ---- NaN values ------------------------------------------------------------------------- */

/* Whether n elements of a float dtype hold a NaN, and the first one's index in *at. A NaN's
 * magnitude bits (sign cleared) lie above infinity's, so adding (limit - infinity) to them,
 * which fits the lane for every value, carries into the lane's top bit exactly for NaNs: four
 * bf16 or f16 lanes, or two f32, per 64-bit word, with no carry between lanes. The loop over
 * words is branch-free, so the scan costs a small part of the read that filled the buffer (on
 * an H200 machine's 16 threads, bf16 loads at 47 GB/s, 0.85 of its pinned copy). */
static bool find_nan(const void *data, size_t n, recap_dtype dtype, size_t *at) {
  uint64_t magnitude, bias, top;
  unsigned lanes;
  switch (dtype) {
    case RECAP_DTYPE_BF16:
      magnitude = 0x7fff7fff7fff7fffull, bias = 0x007f007f007f007full;
      top = 0x8000800080008000ull, lanes = 4;
      break;
    case RECAP_DTYPE_F16:
      magnitude = 0x7fff7fff7fff7fffull, bias = 0x03ff03ff03ff03ffull;
      top = 0x8000800080008000ull, lanes = 4;
      break;
    case RECAP_DTYPE_F32:
      magnitude = 0x7fffffff7fffffffull, bias = 0x007fffff007fffffull;
      top = 0x8000000080000000ull, lanes = 2;
      break;
    default:
      return false;
  }
  /* Two words per step in a 16-byte vector (GCC and Clang's vector extension, SSE2 or NEON):
   * 1.5x the scalar loop's rate on the CI machine (28 against 18 GB/s a core). */
  typedef uint64_t word_pair __attribute__((vector_size(16)));
  const word_pair magnitudes = {magnitude, magnitude}, biases = {bias, bias};
  enum { BLOCK = 512 }; /* words scanned before a look at the flags (even) */
  size_t words = n / lanes / 2 * 2;
  for (size_t w0 = 0; w0 < words; w0 += BLOCK) {
    size_t end = words - w0 < BLOCK ? words : w0 + BLOCK;
    word_pair pairs = {0, 0};
    for (size_t w = w0; w < end; w += 2) {
      word_pair pair;
      memcpy(&pair, (const char *)data + w * 8, 16);
      pairs |= (pair & magnitudes) + biases;
    }
    if ((pairs[0] | pairs[1]) & top) {
      n = end * lanes; /* the NaN is in this block: find it element by element below */
      words = w0;
      break;
    }
  }
  for (size_t i = words * lanes; i < n; ++i) {
    float v = recap__load_f32(data, dtype, (int64_t)i);
    if (v != v) {
      *at = i;
      return true;
    }
  }
  return false;
}

/* ---- element conversion ---------------------------------------------------------------- */

typedef enum { CONVERTED, OUT_OF_RANGE, NOT_A_NUMBER } conversion;

/* Converts n elements of `from` at src into `to` at dst, element i going to dst[i * stride].
 * OUT_OF_RANGE when an i64 does not fit i32, NOT_A_NUMBER at a NaN between float types (the
 * check rides on the conversion's own pass; a copy within one dtype is scanned by read_source);
 * *bad is then the element's index. */
static conversion convert(void *dst, int64_t stride, recap_dtype to, const void *src,
                          recap_dtype from, size_t n, size_t *bad) {
  size_t es = recap_dtype_size(to);
  if (from == to) {
    if (stride == 1) {
      memcpy(dst, src, n * es);
    } else {
      for (size_t i = 0; i < n; ++i)
        memcpy((char *)dst + (int64_t)i * stride * (int64_t)es, (const char *)src + i * es, es);
    }
    return CONVERTED;
  }
  if (from == RECAP_DTYPE_I32 && to == RECAP_DTYPE_I64) {
    for (size_t i = 0; i < n; ++i)
      ((int64_t *)dst)[(int64_t)i * stride] = ((const int32_t *)src)[i];
    return CONVERTED;
  }
  if (from == RECAP_DTYPE_I64 && to == RECAP_DTYPE_I32) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v = ((const int64_t *)src)[i];
      if (v < INT32_MIN || v > INT32_MAX) {
        *bad = i;
        return OUT_OF_RANGE;
      }
      ((int32_t *)dst)[(int64_t)i * stride] = (int32_t)v;
    }
    return CONVERTED;
  }
  /* The common widening, written out: a bf16 is the high half of its f32. Eight at a time in
   * 16-byte vectors (GCC and Clang's vector extension: GCC 12 left the plain loop scalar once
   * it also tested for NaNs), with find_nan's carry test on each lane: 8.7 GB/s of input a core
   * on the CI machine, against 6.0 for the plain loop without the test. */
  if (from == RECAP_DTYPE_BF16 && to == RECAP_DTYPE_F32 && stride == 1) {
    typedef uint16_t halves __attribute__((vector_size(16)));
    typedef uint32_t words __attribute__((vector_size(32)));
    const uint16_t *in = src;
    uint32_t *out = dst;
    const halves magnitude = {0x7fff, 0x7fff, 0x7fff, 0x7fff, 0x7fff, 0x7fff, 0x7fff, 0x7fff};
    const halves bias = {0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f};
    halves lanes = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      halves h;
      memcpy(&h, in + i, sizeof h);
      words w = __builtin_convertvector(h, words) << 16;
      memcpy(out + i, &w, sizeof w);
      lanes |= (h & magnitude) + bias;
    }
    uint16_t flags = 0;
    for (int l = 0; l < 8; ++l) flags |= lanes[l];
    for (; i < n; ++i) {
      out[i] = (uint32_t)in[i] << 16;
      flags |= (uint16_t)((in[i] & 0x7fffu) + 0x7fu);
    }
    if (!(flags & 0x8000u)) return CONVERTED;
  }
  /* Float to float through f32: exact for every f16 and bf16, so each result is rounded once. */
  for (size_t i = 0; i < n; ++i) {
    float v = recap__load_f32(src, from, (int64_t)i);
    if (v != v) {
      *bad = i;
      return NOT_A_NUMBER;
    }
    recap__store_f32(dst, to, (int64_t)i * stride, v);
  }
  return CONVERTED;
}

/* ---- the work ---------------------------------------------------------------------------- */

typedef struct {
  const char *path;
  int fd;
  const recap__file_stamp *stamp;
} open_file;

/* A chunk of one source (source >= 0), or a whole tensor assembled on the host (-1). */
typedef struct {
  size_t job;
  int source;
  size_t file;          /* into loader.files (chunks) */
  uint64_t file_offset; /* chunks: the first byte read */
  size_t bytes;         /* chunks: bytes read */
  size_t dst_offset;    /* chunks: bytes into the job's destination */
} task;

typedef struct {
  const recap__weight_job *jobs;
  open_file *files;
  size_t num_files;
  size_t *source_file; /* per job, per source (flattened with source_base) */
  size_t *source_base; /* per job: its first entry in source_file */
  task *tasks;
  size_t num_tasks;
  size_t chunk;
  atomic_size_t next;
  atomic_bool stop;
  pthread_mutex_t lock;
  recap_status status; /* the first failure */
  size_t failed_job;
  char message[1200];
} loader;

typedef struct {
  void *in, *out;
  recap_event *done;
  bool pending; /* a copy from this slot may still run */
} slot;

typedef struct {
  loader *L;
  recap_stream *stream;
  slot slots[SLOTS];
  int next_slot;
  pthread_t thread;
  bool started;
} worker;

static void record_failure(loader *L, recap_status st, size_t job) {
  pthread_mutex_lock(&L->lock);
  if (L->status == RECAP_OK) {
    L->status = st;
    L->failed_job = job;
    snprintf(L->message, sizeof L->message, "%s", recap_last_error());
  }
  pthread_mutex_unlock(&L->lock);
  atomic_store(&L->stop, true);
}

/* The next slot of the ring, once the copy that last read it is done. */
static recap_status take_slot(worker *w, slot **out) {
  slot *s = &w->slots[w->next_slot];
  w->next_slot = (w->next_slot + 1) % SLOTS;
  if (s->pending) RECAP_TRY(recap_event_synchronize(s->done));
  s->pending = false;
  if (!s->in) RECAP_TRY(recap_host_malloc(w->L->chunk, &s->in));
  *out = s;
  return RECAP_OK;
}

static const recap__weight_source *source_of(const loader *L, size_t job, int k) {
  return &L->jobs[job].plan->sources[k];
}

static const open_file *file_of(const loader *L, size_t job, int k) {
  return &L->files[L->source_file[L->source_base[job] + (size_t)k]];
}

/* Element `element` (row-major) of source s as "[i, j]" in where. */
static void element_coords(const recap__weight_source *s, uint64_t element, char *where,
                           size_t size) {
  uint64_t coord[RECAP_MAX_DIMS];
  for (int d = s->ndim - 1; d >= 0; --d) {
    coord[d] = element % (uint64_t)s->shape[d];
    element /= (uint64_t)s->shape[d];
  }
  int used = snprintf(where, size, "[");
  for (int d = 0; d < s->ndim && used > 0 && (size_t)used < size; ++d)
    used += snprintf(where + used, size - (size_t)used, "%s%" PRIu64, d ? ", " : "", coord[d]);
  if (used > 0 && (size_t)used < size) snprintf(where + used, size - (size_t)used, "]");
}

/* The failure for element `element` of source s being NaN, at its coordinates. */
static recap_status nan_failure(const recap__weight_source *s, uint64_t element) {
  char where[24 * RECAP_MAX_DIMS + 4];
  element_coords(s, element, where, sizeof where);
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "'%s'%s%s%s: element %s is NaN: recap refuses NaN weights, which make every "
                    "output they reach NaN (the file is damaged, or was saved from a run that "
                    "diverged)",
                    s->path, s->key ? ": key '" : "", s->key ? s->key : "", s->key ? "'" : "",
                    where);
}

/* Reads `bytes` of a source at `offset` into buf; a short read names the key too, and so does
 * a NaN among the values read when the tensor keeps the source's dtype (a cast finds NaNs as
 * it converts). */
static recap_status read_source(const loader *L, size_t job, int k, void *buf, size_t bytes,
                                uint64_t offset) {
  const open_file *f = file_of(L, job, k);
  const recap__weight_source *s = source_of(L, job, k);
  recap_status st = recap__file_read_at(f->fd, f->path, buf, bytes, offset);
  if (st != RECAP_OK && s->key) return recap__error_context(st, "key '%s': ", s->key);
  size_t es = recap_dtype_size(s->dtype), at = 0;
  if (st == RECAP_OK && s->dtype == L->jobs[job].plan->dtype &&
      find_nan(buf, bytes / es, s->dtype, &at))
    return nan_failure(s, (offset - s->offset) / es + at);
  return st;
}

static recap_status conversion_failure(const recap__weight_source *s, conversion c,
                                       size_t element) {
  if (c == NOT_A_NUMBER) return nan_failure(s, element);
  char where[24 * RECAP_MAX_DIMS + 4];
  element_coords(s, element, where, sizeof where);
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "'%s'%s%s%s: element %s does not fit %s (cast from %s)", s->path,
                    s->key ? ": key '" : "", s->key ? s->key : "", s->key ? "'" : "", where,
                    recap_dtype_name(RECAP_DTYPE_I32), recap_dtype_name(s->dtype));
}

static recap_status run_chunk(worker *w, const task *t) {
  loader *L = w->L;
  const recap__weight_job *job = &L->jobs[t->job];
  const recap__weight_source *s = source_of(L, t->job, t->source);
  slot *sl;
  RECAP_TRY(take_slot(w, &sl));
  RECAP_TRY(read_source(L, t->job, t->source, sl->in, t->bytes, t->file_offset));
  const void *src = sl->in;
  size_t out_bytes = t->bytes;
  if (s->dtype != job->plan->dtype) {
    if (!sl->out) RECAP_TRY(recap_host_malloc(L->chunk, &sl->out));
    size_t n = t->bytes / recap_dtype_size(s->dtype), bad = 0;
    conversion c = convert(sl->out, 1, job->plan->dtype, sl->in, s->dtype, n, &bad);
    if (c != CONVERTED)
      return conversion_failure(
          s, c, (size_t)((t->file_offset - s->offset) / recap_dtype_size(s->dtype)) + bad);
    src = sl->out;
    out_bytes = n * recap_dtype_size(job->plan->dtype);
  }
  RECAP_TRY(recap_memcpy_async((char *)job->dst + t->dst_offset, src, out_bytes, w->stream));
  RECAP_TRY(recap_event_record(sl->done, w->stream));
  sl->pending = true;
  return RECAP_OK;
}

/* Row-major strides of a shape, in elements. */
static void strides_of(int ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    strides[d] = s;
    s *= shape[d];
  }
}

/* Writes the elements [e, e + n) of source k's selected rows (counted from the first selected
 * row, `data` holding them) into the image, each where the plan puts it. */
static recap_status scatter(const recap__weight_plan *plan, int k, int64_t concat_offset,
                            const void *data, int64_t e, int64_t n, void *image) {
  const recap__weight_source *s = &plan->sources[k];
  int nd = s->ndim, last = nd - 1;
  int64_t row_elems = 1;
  for (int d = 1; d < nd; ++d) row_elems *= s->shape[d];
  int64_t dstride[RECAP_MAX_DIMS];
  strides_of(plan->ndim, plan->shape, dstride);
  size_t es_from = recap_dtype_size(s->dtype), es_to = recap_dtype_size(plan->dtype);
  int64_t step = plan->transpose ? dstride[0] : dstride[last];
  for (int64_t i = e; i < e + n;) {
    int64_t row = i / row_elems, rem = i % row_elems;
    int64_t col = rem % s->shape[last], mid = rem / s->shape[last];
    int64_t run = s->shape[last] - col;
    if (run > e + n - i) run = e + n - i;
    int64_t lo = col > s->cols[0] ? col : s->cols[0];
    int64_t hi = col + run < s->cols[1] ? col + run : s->cols[1];
    if (lo < hi) {
      /* The selection's coordinates, then the result's (transposed or not, offset along the
       * concat axis). */
      int64_t coord[RECAP_MAX_DIMS];
      coord[0] = row;
      for (int d = last - 1; d >= 1; --d) {
        coord[d] = mid % s->shape[d];
        mid /= s->shape[d];
      }
      coord[last] = lo - s->cols[0];
      if (plan->transpose) {
        int64_t swap = coord[0];
        coord[0] = coord[1];
        coord[1] = swap;
      }
      coord[plan->concat] += concat_offset;
      int64_t at = 0;
      for (int d = 0; d < nd; ++d) at += coord[d] * dstride[d];
      size_t bad = 0;
      const char *from = (const char *)data + (size_t)(i - e + (lo - col)) * es_from;
      conversion c = convert((char *)image + (size_t)at * es_to, step, plan->dtype, from, s->dtype,
                             (size_t)(hi - lo), &bad);
      if (c != CONVERTED)
        return conversion_failure(s, c, (size_t)(s->rows[0] * row_elems + i + (lo - col)) + bad);
    }
    i += run;
  }
  return RECAP_OK;
}

/* A tensor assembled in a pinned host image, then copied in one piece. */
static recap_status run_image(worker *w, const task *t) {
  loader *L = w->L;
  const recap__weight_job *job = &L->jobs[t->job];
  const recap__weight_plan *plan = job->plan;
  size_t es_to = recap_dtype_size(plan->dtype);
  size_t bytes = es_to;
  for (int d = 0; d < plan->ndim; ++d) bytes *= (size_t)plan->shape[d];
  void *image = NULL;
  RECAP_TRY(recap_host_malloc(bytes, &image));
  recap_status st = RECAP_OK;
  bool abandoned = false; /* another task failed: the image is not worth copying */
  int64_t concat_offset = 0;
  for (int k = 0; k < plan->num_sources && st == RECAP_OK && !abandoned; ++k) {
    const recap__weight_source *s = &plan->sources[k];
    size_t es = recap_dtype_size(s->dtype);
    int64_t row_elems = 1;
    for (int d = 1; d < s->ndim; ++d) row_elems *= s->shape[d];
    /* The selected rows are contiguous in the file; the columns are picked while scattering. */
    int64_t total = (s->rows[1] - s->rows[0]) * row_elems;
    int64_t per_read = (int64_t)(L->chunk / es);
    uint64_t first = s->offset + (uint64_t)s->rows[0] * (uint64_t)row_elems * es;
    for (int64_t e = 0; e < total && st == RECAP_OK && !abandoned; e += per_read) {
      int64_t n = total - e < per_read ? total - e : per_read;
      slot *sl = NULL;
      st = take_slot(w, &sl);
      if (st == RECAP_OK)
        st = read_source(L, t->job, k, sl->in, (size_t)n * es, first + (uint64_t)e * es);
      if (st == RECAP_OK) st = scatter(plan, k, concat_offset, sl->in, e, n, image);
      abandoned = atomic_load(&L->stop);
    }
    int64_t result[RECAP_MAX_DIMS];
    memcpy(result, s->shape, sizeof result);
    result[0] = s->rows[1] - s->rows[0];
    result[s->ndim - 1] = s->cols[1] - s->cols[0];
    concat_offset += plan->transpose ? result[1 - plan->concat] : result[plan->concat];
  }
  if (st == RECAP_OK && !abandoned) {
    st = recap_memcpy_async(job->dst, image, bytes, w->stream);
    /* The image is reused by the allocator only once the stream has passed the copy; if that
     * cannot be arranged, the copy is waited for here. */
    if (st == RECAP_OK && recap_host_record_stream(image, w->stream) != RECAP_OK)
      st = recap_stream_synchronize(w->stream);
  }
  recap_host_free(image);
  return st;
}

static void *work(void *arg) {
  worker *w = arg;
  loader *L = w->L;
  /* A new thread's current device is device 0; copies and events go to the stream's. */
  recap_status set = recap_device_set(recap_stream_device(w->stream));
  if (set != RECAP_OK) record_failure(L, set, L->tasks[0].job);
  while (!atomic_load(&L->stop)) {
    size_t i = atomic_fetch_add(&L->next, 1);
    if (i >= L->num_tasks) break;
    const task *t = &L->tasks[i];
    recap_status st = t->source >= 0 ? run_chunk(w, t) : run_image(w, t);
    if (st != RECAP_OK) record_failure(L, st, t->job);
  }
  return NULL;
}

/* ---- planning the tasks -------------------------------------------------------------------- */

/* Whether every source of the plan lands in one contiguous range of the tensor, in file
 * order: then it is read in chunks straight into staging. */
static bool contiguous(const recap__weight_plan *plan) {
  if (plan->transpose) return false;
  for (int d = 0; d < plan->concat; ++d)
    if (plan->shape[d] != 1) return false;
  for (int k = 0; k < plan->num_sources; ++k) {
    const recap__weight_source *s = &plan->sources[k];
    if (s->ndim > 1 && (s->cols[0] != 0 || s->cols[1] != s->shape[s->ndim - 1])) return false;
  }
  return true;
}

static recap_status add_task(loader *L, size_t *capacity, task t) {
  if (L->num_tasks == *capacity) {
    size_t grown = *capacity * 2 + 64;
    task *tasks = realloc(L->tasks, grown * sizeof *tasks);
    if (!tasks) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to plan the weight load");
    L->tasks = tasks;
    *capacity = grown;
  }
  L->tasks[L->num_tasks++] = t;
  return RECAP_OK;
}

static recap_status plan_tasks(loader *L, size_t count) {
  size_t capacity = 0;
  for (size_t j = 0; j < count; ++j) {
    const recap__weight_plan *plan = L->jobs[j].plan;
    if (!contiguous(plan)) {
      RECAP_TRY(add_task(L, &capacity, (task){.job = j, .source = -1}));
      continue;
    }
    int64_t dstride[RECAP_MAX_DIMS];
    strides_of(plan->ndim, plan->shape, dstride);
    size_t es_to = recap_dtype_size(plan->dtype);
    int64_t concat_offset = 0;
    for (int k = 0; k < plan->num_sources; ++k) {
      const recap__weight_source *s = &plan->sources[k];
      size_t es = recap_dtype_size(s->dtype), widest = es > es_to ? es : es_to;
      int64_t row_elems = 1;
      for (int d = 1; d < s->ndim; ++d) row_elems *= s->shape[d];
      int64_t rows = s->rows[1] - s->rows[0];
      uint64_t elems = (uint64_t)(rows * row_elems);
      uint64_t first = s->offset + (uint64_t)s->rows[0] * (uint64_t)row_elems * es;
      size_t dst_first = (size_t)(concat_offset * dstride[plan->concat]) * es_to;
      /* Both the chunk read and its converted copy must fit a staging slot. */
      uint64_t per_chunk = L->chunk / widest;
      for (uint64_t e = 0; e < elems; e += per_chunk) {
        uint64_t n = elems - e < per_chunk ? elems - e : per_chunk;
        RECAP_TRY(add_task(L, &capacity,
                           (task){.job = j,
                                  .source = k,
                                  .file = L->source_file[L->source_base[j] + (size_t)k],
                                  .file_offset = first + e * es,
                                  .bytes = (size_t)(n * es),
                                  .dst_offset = dst_first + (size_t)e * es_to}));
      }
      concat_offset += plan->concat == 0 ? rows : s->shape[plan->concat];
    }
  }
  return RECAP_OK;
}

/* Opens every file the jobs read, once, and checks it is still what the spec check saw. */
static recap_status open_files(loader *L, size_t count, size_t *failed) {
  size_t sources = 0;
  for (size_t j = 0; j < count; ++j) sources += (size_t)L->jobs[j].plan->num_sources;
  L->source_base = calloc(count ? count : 1, sizeof *L->source_base);
  L->source_file = calloc(sources ? sources : 1, sizeof *L->source_file);
  L->files = calloc(sources ? sources : 1, sizeof *L->files);
  if (!L->source_base || !L->source_file || !L->files)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to plan the weight load");
  recap__names by_path = {0};
  recap_status st = RECAP_OK;
  size_t at = 0;
  for (size_t j = 0; j < count && st == RECAP_OK; ++j) {
    L->source_base[j] = at;
    const recap__weight_plan *plan = L->jobs[j].plan;
    for (int k = 0; k < plan->num_sources && st == RECAP_OK; ++k, ++at) {
      const recap__weight_source *s = &plan->sources[k];
      int f = recap__names_get(&by_path, s->path), previous;
      if (f < 0) {
        open_file *of = &L->files[L->num_files];
        uint64_t size;
        *of = (open_file){.path = s->path, .fd = -1, .stamp = &s->stamp};
        st = recap__file_open_regular_fd(s->path, "weights file", &of->fd, &size);
        if (st == RECAP_OK) st = recap__checkpoint_check_stamp(of->fd, s->path, &s->stamp);
        if (of->fd >= 0) L->num_files++;
        if (st != RECAP_OK) {
          *failed = j;
          break;
        }
        f = (int)L->num_files - 1;
        if (!recap__names_put(&by_path, s->path, f, &previous))
          st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to plan the weight load");
      }
      L->source_file[at] = (size_t)f;
    }
  }
  recap__names_free(&by_path);
  return st;
}

/* ---- the whole load ------------------------------------------------------------------------ */

static int default_threads(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int)cores;
}

static recap_status start_workers(loader *L, worker *workers, int n, recap_stream *stream) {
  recap_device device = recap_stream_device(stream);
  for (int i = 0; i < n; ++i) {
    worker *w = &workers[i];
    w->L = L;
    RECAP_TRY(recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, &w->stream));
    /* The destinations were allocated, and may have been written, on `stream`. */
    RECAP_TRY(recap_stream_wait_stream(w->stream, stream));
    for (int k = 0; k < SLOTS; ++k)
      RECAP_TRY(recap_event_create(device, RECAP_EVENT_BLOCKING, &w->slots[k].done));
  }
  for (int i = 0; i < n; ++i) {
    if (pthread_create(&workers[i].thread, NULL, work, &workers[i]) != 0)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot start a weight-loading thread");
    workers[i].started = true;
  }
  return RECAP_OK;
}

/* Joins the threads, waits for every queued copy and frees the workers' resources; the first
 * failure of these is returned. */
static recap_status stop_workers(worker *workers, int n) {
  recap_status st = RECAP_OK;
  for (int i = 0; i < n; ++i)
    if (workers[i].started) pthread_join(workers[i].thread, NULL);
  for (int i = 0; i < n; ++i) {
    worker *w = &workers[i];
    if (w->stream) {
      recap_status rs = recap_stream_synchronize(w->stream);
      if (st == RECAP_OK) st = rs;
    }
    for (int k = 0; k < SLOTS; ++k) {
      recap_host_free(w->slots[k].in);
      recap_host_free(w->slots[k].out);
      recap_event_destroy(w->slots[k].done);
    }
    recap_stream_destroy(w->stream);
  }
  return st;
}

recap_status recap__weights_load(const recap__weight_job *jobs, size_t count, recap_stream *stream,
                                 const recap__weight_load_options *options, size_t *failed) {
  RECAP_CHECK_ARG((jobs || count == 0) && stream && failed);
  *failed = 0;
  for (size_t j = 0; j < count; ++j) RECAP_CHECK_ARG(jobs[j].plan && jobs[j].dst);
  loader L = {.jobs = jobs, .status = RECAP_OK};
  L.chunk = options && options->chunk_bytes ? options->chunk_bytes : DEFAULT_CHUNK;
  if (L.chunk < MIN_CHUNK) L.chunk = MIN_CHUNK;
  atomic_init(&L.next, 0);
  atomic_init(&L.stop, false);
  pthread_mutex_init(&L.lock, NULL);
  worker *workers = NULL;
  int n = 0;
  recap_status st = open_files(&L, count, failed);
  if (st == RECAP_OK) st = plan_tasks(&L, count);
  if (st == RECAP_OK && L.num_tasks > 0) {
    n = options && options->threads > 0 ? options->threads : default_threads();
    if ((size_t)n > L.num_tasks) n = (int)L.num_tasks;
    workers = calloc((size_t)n, sizeof *workers);
    if (!workers) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for weight-loading threads");
      n = 0;
    }
  }
  if (st == RECAP_OK && n > 0) {
    st = start_workers(&L, workers, n, stream);
    if (st != RECAP_OK) atomic_store(&L.stop, true);
  }
  recap_status stopped = stop_workers(workers, n);
  if (st == RECAP_OK && L.status != RECAP_OK) {
    st = recap__fail_plain(L.status, "%s", L.message);
    *failed = L.failed_job;
  }
  if (st == RECAP_OK) st = stopped;
  for (size_t f = 0; f < L.num_files; ++f) close(L.files[f].fd);
  free(workers);
  free(L.tasks);
  free(L.files);
  free(L.source_file);
  free(L.source_base);
  pthread_mutex_destroy(&L.lock);
  return st;
}
