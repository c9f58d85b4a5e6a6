/*
 * runner.c: the prefill and decode pipelines of a paged serving spec (see runner.h).
 */
#include "serve/runner.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/error.h"
#include "serve/request.h"
#include "serve/step_header.h"

static const char *const LAYOUT_HINT = "a paged serving spec (`recap import-hf --paged`)";
static const double DEFAULT_KV_FRACTION = 0.5;
static const char *const LOOP_ENV = "RECAP_DECODE_LOOP";
enum { DEFAULT_LOOP_STEPS = 32, MAX_LOOP_STEPS = 4096 };

/* One entry's pipeline, what its step tensors look like, and host staging for them. */
typedef struct {
  recap_pipeline *p;
  const char *name;
  int64_t max_tokens, rows;                          /* ids [T], seqs [Bs, W]: the largest */
  bool ids_bucketed, seqs_bucketed, tokens_bucketed; /* along axis 0 */
  uint64_t replays;                                  /* the pipeline's count after our last run */
  int32_t *ids, *seqs, *sampled;
} entry;

struct recap__runner {
  recap__runner_shape shape;
  entry prefill, decode;
  recap_decode_loop *loop; /* NULL: one launch per decode step */
  int64_t loop_steps;
  recap_loop_limits *limits;    /* per decode row, for a loop launch */
  recap_loop_token *loop_drain; /* with a communicator: a follower polls its loop into it */
  double ready_ms;              /* end of weight loading to every bucket captured (0: eager) */
  /* Tensor parallelism (docs/MULTI_GPU.md): NULL on one GPU. A step header (step_header.h)
   * travels between `staged` (page-locked host memory: rank 0's copy to the device and a
   * follower's copy back are asynchronous, so a follower's only wait is the synchronize under
   * the communicator's watchdog) and `header_dev`, which lives on the prefill entry's stream
   * and is used on the decode entry's too. `words`: the header a follower decodes. */
  recap_comm *comm;
  int64_t *header_dev, *staged;
  int64_t words[RECAP__STEP_WORDS];
  int64_t headers; /* step headers sent (rank 0) or received (the others) */
  bool opened;     /* every rank is past its captures: a stop header pairs with a follower's wait */
};

/* ---- reading the layout ---- */

static recap_status find_tensor(recap_pipeline *p, const char *entry_name, const char *name,
                                recap_tensor_info *out) {
  recap_pipeline_info info;
  RECAP_TRY(recap_pipeline_info_get(p, &info));
  for (size_t i = 0; i < info.num_tensors; i++) {
    RECAP_TRY(recap_pipeline_tensor_info_get(p, i, out));
    if (strcmp(out->name, name) == 0) return RECAP_OK;
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the %s entry has no tensor '%s': not %s",
                    entry_name, name, LAYOUT_HINT);
}

static recap_status not_serving(const char *entry_name, const recap_tensor_info *t,
                                const char *expected) {
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "the %s entry's tensor '%s' (%s, %d dims) is not %s: not %s", entry_name,
                    t->name, recap_dtype_name(t->dtype), t->ndim, expected, LAYOUT_HINT);
}

/* The step tensors: ids [T] and seqs [Bs, W] inputs, tokens [Bs] and logits [Bs, V] outputs. */
static recap_status read_entry(entry *e, int64_t *width, int64_t *vocab) {
  recap_tensor_info ids, seqs, tokens, logits;
  RECAP_TRY(find_tensor(e->p, e->name, "ids", &ids));
  RECAP_TRY(find_tensor(e->p, e->name, "seqs", &seqs));
  RECAP_TRY(find_tensor(e->p, e->name, "tokens", &tokens));
  RECAP_TRY(find_tensor(e->p, e->name, "logits", &logits));
  if (ids.role != RECAP_ROLE_INPUT || ids.dtype != RECAP_DTYPE_I32 || ids.ndim != 1)
    return not_serving(e->name, &ids, "an i32 input [T]");
  if (seqs.role != RECAP_ROLE_INPUT || seqs.dtype != RECAP_DTYPE_I32 || seqs.ndim != 2 ||
      seqs.shape[1] <= RECAP_SEQ_BLOCKS)
    return not_serving(e->name, &seqs, "an i32 input [Bs, W] with W > 16");
  if (!tokens.is_output || tokens.dtype != RECAP_DTYPE_I32 || tokens.ndim != 1 ||
      tokens.shape[0] != seqs.shape[0])
    return not_serving(e->name, &tokens, "an i32 output [Bs]");
  if (!logits.is_output || logits.ndim != 2 || logits.shape[0] != seqs.shape[0])
    return not_serving(e->name, &logits, "an output [Bs, V]");
  e->max_tokens = ids.shape[0];
  e->rows = seqs.shape[0];
  e->ids_bucketed = ids.bucket_axis == 0;
  e->seqs_bucketed = seqs.bucket_axis == 0;
  e->tokens_bucketed = tokens.bucket_axis == 0;
  *width = seqs.shape[1];
  *vocab = logits.shape[1];
  return RECAP_OK;
}

/* The KV pools: every state tensor, each [NB, BS, Hkv, Dh] with one NB and BS. */
static recap_status read_pools(recap_pipeline *p, int64_t *num_blocks, int64_t *block_size,
                               size_t *block_bytes) {
  recap_pipeline_info info;
  RECAP_TRY(recap_pipeline_info_get(p, &info));
  *num_blocks = *block_size = 0;
  *block_bytes = 0;
  for (size_t i = 0; i < info.num_tensors; i++) {
    recap_tensor_info t;
    RECAP_TRY(recap_pipeline_tensor_info_get(p, i, &t));
    if (t.role != RECAP_ROLE_STATE) continue;
    if (t.ndim != 4 || (*num_blocks && (t.shape[0] != *num_blocks || t.shape[1] != *block_size)))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "state '%s' is not a KV pool [NB, BS, Hkv, Dh] like the others: not %s",
                        t.name, LAYOUT_HINT);
    *num_blocks = t.shape[0];
    *block_size = t.shape[1];
    *block_bytes += t.bytes / (size_t)t.shape[0];
  }
  if (*num_blocks == 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the spec has no KV pool state: not %s",
                      LAYOUT_HINT);
  return RECAP_OK;
}

/* ---- creating ---- */

static recap_status open_entry(const char *spec_path, const recap_generator_options *o,
                               const char *name, const char *const *dims, bool eager,
                               recap_pipeline *share, recap_pipeline **out) {
  recap_pipeline_options po = {
      .struct_size = sizeof po,
      .override_device = o->override_device,
      .device = o->device,
      .override_mode = 1,
      .mode = eager ? RECAP_MODE_EAGER : RECAP_MODE_GRAPH,
      .oversize = RECAP_OVERSIZE_FAIL,
      .base_dir = o->base_dir,
      .dims = dims,
      .entry = name,
      .share = share,
  };
  recap_status st = recap_pipeline_create_file(spec_path, &po, out);
  if (st != RECAP_OK) return recap__error_context(st, "the %s entry of %s: ", name, spec_path);
  return RECAP_OK;
}

/* A pool that cannot hold one sequence: a spec whose own NB is too small is a configuration
 * error; a pool sized from kv_bytes or the free memory hit a real capacity limit. */
static recap_status too_small(int64_t num_blocks, const recap__runner_shape *s, const char *why,
                              bool from_spec) {
  return RECAP_FAIL(from_spec ? RECAP_STATUS_INVALID_ARGUMENT : RECAP_STATUS_OUT_OF_MEMORY,
                    "a KV pool of %" PRId64
                    " blocks (%s) cannot hold one sequence of the "
                    "maximum length: %" PRId64 " tokens need %" PRId64 " blocks of %" PRId64,
                    num_blocks, why, s->max_seq, s->max_blocks_per_seq, s->block_size);
}

/* The pool's blocks from the options: *num_blocks 0 keeps the spec's; OUT_OF_MEMORY when the
 * capacity asked for holds no block. Sizing needs the bytes of a block and, for a fraction,
 * the free memory once the weights are in, so a probe pipeline with a one-block pool is loaded
 * first (eager: nothing is captured) and destroyed after. */
static recap_status choose_blocks(const char *spec_path, const recap_generator_options *o,
                                  int64_t *num_blocks, char *why, size_t why_size) {
  *num_blocks = 0;
  snprintf(why, why_size, "the spec's NB");
  bool host = o->override_device && o->device.backend == RECAP_BACKEND_HOST;
  if (host && o->kv_bytes == 0) return RECAP_OK;
  static const char *const one_block[] = {"NB=1", NULL};
  recap_pipeline *probe = NULL;
  RECAP_TRY(open_entry(spec_path, o, "prefill", one_block, true, NULL, &probe));
  recap_pipeline_info info;
  int64_t nb, bs;
  size_t block_bytes, free_bytes = 0, total_bytes = 0;
  recap_status st = recap_pipeline_info_get(probe, &info);
  if (st == RECAP_OK) st = read_pools(probe, &nb, &bs, &block_bytes);
  bool by_fraction =
      st == RECAP_OK && o->kv_bytes == 0 && info.device.backend != RECAP_BACKEND_HOST;
  /* kv_bytes is checked against the memory free once the weights are in, so that too much is
   * refused naming the option rather than as the spec's pool shapes. */
  if (st == RECAP_OK && (by_fraction || o->kv_bytes))
    st = recap_device_mem_get_info(info.device, &free_bytes, &total_bytes);
  recap_pipeline_destroy(probe);
  if (st != RECAP_OK) return st;
  if (o->kv_bytes > free_bytes)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "kv_bytes %zu is more than the device's %zu bytes free once the weights "
                      "are loaded (%zu in all)",
                      o->kv_bytes, free_bytes, total_bytes);
  double fraction = o->kv_fraction > 0 ? o->kv_fraction : DEFAULT_KV_FRACTION;
  if (o->kv_bytes) {
    *num_blocks = (int64_t)(o->kv_bytes / block_bytes);
    snprintf(why, why_size, "kv_bytes %zu", o->kv_bytes);
  } else if (by_fraction) {
    *num_blocks = (int64_t)((double)free_bytes * fraction / (double)block_bytes);
    snprintf(why, why_size, "%.2f of %.1f MiB free", fraction, (double)free_bytes / (1 << 20));
  }
  if ((o->kv_bytes || by_fraction) && *num_blocks == 0)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "%s holds not even one KV block of %zu bytes (every layer's K and V)", why,
                      block_bytes);
  if (*num_blocks > INT32_MAX) *num_blocks = INT32_MAX;
  return RECAP_OK;
}

static recap_status read_shape(recap__runner *r) {
  recap__runner_shape *s = &r->shape;
  int64_t width, decode_width, vocab, decode_vocab;
  RECAP_TRY(read_entry(&r->prefill, &width, &vocab));
  RECAP_TRY(read_entry(&r->decode, &decode_width, &decode_vocab));
  if (decode_width != width || decode_vocab != vocab || r->decode.rows != r->decode.max_tokens)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the decode entry's seqs [%" PRId64 ", %" PRId64 "] and logits [.., %" PRId64
                      "] do not match one token per sequence and the prefill entry's rows "
                      "[.., %" PRId64 "] and vocabulary %" PRId64 ": not %s",
                      r->decode.rows, decode_width, decode_vocab, width, vocab, LAYOUT_HINT);
  RECAP_TRY(read_pools(r->prefill.p, &s->num_blocks, &s->block_size, &s->block_bytes));
  recap_pipeline_info info;
  RECAP_TRY(recap_pipeline_info_get(r->prefill.p, &info));
  s->device = info.device;
  s->vocab = vocab;
  s->max_blocks_per_seq = width - RECAP_SEQ_BLOCKS;
  s->max_seq = s->max_blocks_per_seq * s->block_size;
  s->prefill_tokens = r->prefill.max_tokens;
  s->prefill_seqs = r->prefill.rows;
  s->decode_rows = r->decode.rows;
  return RECAP_OK;
}

static recap_status alloc_staging(entry *e, int64_t width) {
  e->ids = calloc((size_t)e->max_tokens, sizeof *e->ids);
  e->seqs = calloc((size_t)(e->rows * width), sizeof *e->seqs);
  e->sampled = calloc((size_t)e->rows, sizeof *e->sampled);
  if (!e->ids || !e->seqs || !e->sampled)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the %s entry's step buffers",
                      e->name);
  return RECAP_OK;
}

static const char *plural(int64_t n) {
  return n == 1 ? "" : "s";
}

static void print_pool(const recap__runner_shape *s, const char *why) {
  fprintf(stderr,
          "recap generator: KV pool of %" PRId64 " block%s x %" PRId64 " tokens = %" PRId64
          " tokens, %.1f MiB (%s); up to %" PRId64 " sequence%s decoding, prefill steps of %" PRId64
          " tokens from up to %" PRId64 " sequence%s\n",
          s->num_blocks, plural(s->num_blocks), s->block_size, s->num_blocks * s->block_size,
          (double)s->block_bytes * (double)s->num_blocks / (1 << 20), why, s->decode_rows,
          plural(s->decode_rows), s->prefill_tokens, s->prefill_seqs, plural(s->prefill_seqs));
}

/* One entry's buckets and the memory its graphs replay in, before anything is captured: every
 * bucket's intermediates are planned into one arena sized for the largest, so this is what the
 * captures will take (op workspaces and the pool's rounding included), not a per-bucket sum. */
static recap_status print_graph_memory(const entry *e) {
  recap_pipeline_info info;
  recap_pipeline_stats stats;
  RECAP_TRY(recap_pipeline_info_get(e->p, &info));
  RECAP_TRY(recap_pipeline_stats_get(e->p, &stats));
  char buckets[160];
  size_t n = 0;
  buckets[0] = 0;
  if (info.bucket_dim) n = (size_t)snprintf(buckets, sizeof buckets, " (%s = ", info.bucket_dim);
  for (size_t b = 0; info.bucket_dim && b < info.num_buckets && n < sizeof buckets; b++) {
    /* Long lists show their first values and the last: enough to see the steps. */
    if (info.num_buckets > 12 && b == 8) {
      n += (size_t)snprintf(buckets + n, sizeof buckets - n, ", ...");
      b = info.num_buckets - 2;
      continue;
    }
    n += (size_t)snprintf(buckets + n, sizeof buckets - n, "%s%" PRId64, b ? "," : "",
                          info.bucket_values[b]);
  }
  if (info.bucket_dim && n < sizeof buckets) snprintf(buckets + n, sizeof buckets - n, ")");
  fprintf(stderr,
          "recap generator: %s: %zu graph%s to capture%s, one arena of %.1f MiB for "
          "every bucket's intermediates, %.1f MiB private pool in all\n",
          e->name, info.num_buckets, info.num_buckets == 1 ? "" : "s", buckets,
          (double)stats.arena_bytes / (1 << 20), (double)stats.pool_reserved_bytes / (1 << 20));
  return RECAP_OK;
}

/* Captures every bucket. A failed capture leaves the pipeline running eagerly (the engine has
 * warned on stderr, and the stats count eager steps), as a first run would: only a failure
 * before it (warmup) fails the generator. */
static recap_status capture(recap_pipeline *p) {
  recap_status st = recap_pipeline_capture(p);
  recap_pipeline_stats stats;
  if (st != RECAP_OK && recap_pipeline_stats_get(p, &stats) == RECAP_OK &&
      stats.capture_failures > 0)
    return RECAP_OK;
  return st;
}

recap_status recap__decode_loop_steps_from_env(int64_t *out) {
  const char *v = getenv(LOOP_ENV);
  *out = DEFAULT_LOOP_STEPS;
  if (!v || !*v) return RECAP_OK;
  char *end = NULL;
  long long n = strtoll(v, &end, 10);
  if (*end != '\0' || n < 0 || n > MAX_LOOP_STEPS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%s='%s' is not a step count in [0, %d] (0: one launch per decode step)",
                      LOOP_ENV, v, MAX_LOOP_STEPS);
  *out = n;
  return RECAP_OK;
}

/* The decode loop, where the backend and the spec allow one; otherwise the runner steps one
 * launch at a time, and says why (unless quiet). */
static recap_status open_loop(recap__runner *r, const recap_generator_options *o) {
  int64_t steps;
  RECAP_TRY(recap__decode_loop_steps_from_env(&steps));
  if (o->eager) steps = 0;
  /* Ranks build their loops together (recap_decode_loop_create_dist), or none: they agree on
   * the smallest step count first, so a rank told RECAP_DECODE_LOOP=0 turns them off for all. */
  if (r->comm) {
    recap_status st = recap_comm_agree_min(r->comm, &steps);
    if (st != RECAP_OK)
      return recap__error_context(st, "agreeing on %s with the other ranks: ", LOOP_ENV);
  }
  if (steps == 0) return RECAP_OK;
  /* Any failure leaves the step-per-launch path, which works wherever the captures did: no
   * conditional nodes, or a driver refusing what the body holds (the line says which). With
   * a communicator every rank falls back together. */
  recap_status st = r->comm
                        ? recap_decode_loop_create_dist(r->decode.p, r->comm, steps, 0, &r->loop)
                        : recap_decode_loop_create(r->decode.p, steps, 0, &r->loop);
  if (st != RECAP_OK) {
    if (!o->quiet)
      fprintf(stderr, "recap generator: one graph launch per decode step (%s): %s\n",
              recap_status_name(st), recap_last_error());
    r->loop = NULL;
    return RECAP_OK;
  }
  r->loop_steps = steps;
  r->limits = calloc((size_t)r->decode.rows, sizeof *r->limits);
  /* A runner on a communicator may follow (recap_generator_follow). */
  if (r->comm) r->loop_drain = calloc((size_t)(steps * r->decode.rows), sizeof *r->loop_drain);
  if (!r->limits || (r->comm && !r->loop_drain))
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for loop limits");
  if (!o->quiet)
    fprintf(stderr, "recap generator: decode loops of up to %lld steps per graph launch\n",
            (long long)steps);
  return RECAP_OK;
}

/* Every rank must size its pool alike (a block id from rank 0 indexes every rank's pools), but
 * each measures its own free memory: they agree on the smallest count. */
static recap_status agree_on_blocks(recap_comm *comm, int64_t *num_blocks) {
  recap_status st = recap_comm_agree_min(comm, num_blocks);
  if (st != RECAP_OK)
    return recap__error_context(st, "agreeing on the KV pool with the other ranks: ");
  return RECAP_OK;
}

/* A distributed runner's captures: each warms its buckets up with eager runs whose collectives
 * pair with the other ranks', so the wait after them is bounded by the communicator's timeout. */
static recap_status capture_dist(recap__runner *r, recap_pipeline *p) {
  RECAP_TRY(capture(p));
  if (!r->comm) return RECAP_OK;
  return recap_comm_synchronize(r->comm, recap_pipeline_stream(p));
}

static recap_status open_headers(recap__runner *r) {
  recap_stream *prefill = recap_pipeline_stream(r->prefill.p);
  RECAP_TRY(recap_host_malloc(sizeof r->words, (void **)&r->staged));
  RECAP_TRY(recap_malloc(r->shape.device, sizeof r->words, prefill, (void **)&r->header_dev));
  return recap_record_stream(r->header_dev, recap_pipeline_stream(r->decode.p));
}

recap_status recap__runner_open(const char *spec_path, const recap_generator_options *o,
                                recap__runner **out) {
  RECAP_CHECK_ARG(spec_path && o && out);
  if (!(o->kv_fraction >= 0 && o->kv_fraction <= 1))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "kv_fraction %g is outside [0, 1] (0: the default, %.1f)", o->kv_fraction,
                      DEFAULT_KV_FRACTION);
  recap__runner *r = calloc(1, sizeof *r);
  if (!r) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a generator's runner");
  r->prefill.name = "prefill";
  r->decode.name = "decode";
  r->comm = o->comm;
  recap_generator_options on_comm = *o;
  if (o->comm && !o->override_device) {
    /* A rank's device is its communicator's. */
    on_comm.override_device = 1;
    on_comm.device = recap_comm_device(o->comm);
  }
  o = &on_comm;
  int64_t num_blocks;
  char why[96], nb_dim[48];
  recap_status st = choose_blocks(spec_path, o, &num_blocks, why, sizeof why);
  if (st == RECAP_OK && r->comm) st = agree_on_blocks(r->comm, &num_blocks);
  snprintf(nb_dim, sizeof nb_dim, "NB=%" PRId64, num_blocks);
  const char *const dims[] = {nb_dim, NULL};
  const char *const *given = num_blocks ? dims : NULL;
  if (st == RECAP_OK)
    st = open_entry(spec_path, o, "prefill", given, o->eager, NULL, &r->prefill.p);
  if (st == RECAP_OK)
    st = open_entry(spec_path, o, "decode", given, o->eager, r->prefill.p, &r->decode.p);
  if (st == RECAP_OK) st = read_shape(r);
  if (st == RECAP_OK && r->shape.num_blocks < r->shape.max_blocks_per_seq)
    st = too_small(r->shape.num_blocks, &r->shape, why, num_blocks == 0);
  int64_t width = r->shape.max_blocks_per_seq + RECAP_SEQ_BLOCKS;
  if (st == RECAP_OK) st = alloc_staging(&r->prefill, width);
  if (st == RECAP_OK) st = alloc_staging(&r->decode, width);
  if (st == RECAP_OK && !o->quiet) {
    print_pool(&r->shape, why);
    if (!o->eager) st = print_graph_memory(&r->prefill);
    if (st == RECAP_OK && !o->eager) st = print_graph_memory(&r->decode);
  }
  /* Both entries are bound and their weights loaded: from here to the last capture is the
   * start-up a server pays per model (warmup, GEMM choice, capture, instantiate). */
  double start_ms = recap__now_ms();
  if (st == RECAP_OK && r->comm) st = open_headers(r);
  if (st == RECAP_OK && !o->eager) st = capture_dist(r, r->prefill.p);
  if (st == RECAP_OK && !o->eager) st = capture_dist(r, r->decode.p);
  if (st == RECAP_OK) st = open_loop(r, o);
  if (st != RECAP_OK) {
    recap__runner_close(r);
    return st;
  }
  r->opened = true;
  if (!o->eager) {
    r->ready_ms = recap__now_ms() - start_ms;
    if (!o->quiet)
      fprintf(stderr, "recap generator: every bucket captured in %.0f ms after the weights\n",
              r->ready_ms);
  }
  *out = r;
  return RECAP_OK;
}

/* Rank 0's side of a step header: sent on `stream` (the one the step runs on, so the header
 * and the run's own broadcast are ordered without a wait). */
static recap_status announce(recap__runner *r, recap__step_kind kind, int64_t tokens, int64_t rows,
                             int64_t steps, recap_stream *stream) {
  recap__step_header h = {
      .kind = kind, .index = r->headers, .tokens = tokens, .rows = rows, .steps = steps};
  /* `staged` is not written again before this run has synchronized. */
  recap__step_header_encode(&h, r->staged);
  RECAP_TRY(recap_memcpy_async(r->header_dev, r->staged, sizeof r->words, stream));
  RECAP_TRY(recap_comm_broadcast(r->comm, r->header_dev, r->header_dev, RECAP__STEP_WORDS,
                                 RECAP_DTYPE_I64, 0, stream));
  r->headers++;
  return RECAP_OK;
}

static void close_entry(entry *e) {
  recap_pipeline_destroy(e->p);
  free(e->ids);
  free(e->seqs);
  free(e->sampled);
}

void recap__runner_close(recap__runner *r) {
  if (!r) return;
  /* Rank 0's last word ends the followers' loops; after a failure of the communicator it
   * fails too, and they fail on their own within the timeout. */
  if (r->comm && r->opened && recap_comm_rank(r->comm) == 0) {
    recap_stream *s = recap_pipeline_stream(r->prefill.p);
    if (announce(r, RECAP__STEP_STOP, 0, 0, 0, s) == RECAP_OK) recap_comm_synchronize(r->comm, s);
  }
  if (r->header_dev) {
    recap_stream_synchronize(recap_pipeline_stream(r->prefill.p));
    recap_stream_synchronize(recap_pipeline_stream(r->decode.p));
  }
  recap_free(r->header_dev);
  recap_host_free(r->staged);
  recap_decode_loop_destroy(r->loop);
  free(r->limits);
  free(r->loop_drain);
  /* The decode pipeline shares the prefill one's weights and pools: either order works, but
   * the sharer first is the natural one. */
  close_entry(&r->decode);
  close_entry(&r->prefill);
  free(r);
}

const recap__runner_shape *recap__runner_shape_get(const recap__runner *r) {
  return &r->shape;
}

double recap__runner_ready_ms(const recap__runner *r) {
  return r->ready_ms;
}

/* ---- steps ---- */

static int32_t float_bits(float v) {
  int32_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

/* seq's row for a step giving it q_len tokens from q_start, after which its cache holds len
 * keys. The row is zero already. */
static void put_row(int32_t *row, int64_t width, const recap__seq *seq, int64_t len,
                    int64_t q_start, int64_t q_len) {
  const recap__sampling *s = &seq->sampling;
  row[RECAP_SEQ_LEN] = (int32_t)len;
  row[RECAP_SEQ_Q_START] = (int32_t)q_start;
  row[RECAP_SEQ_Q_LEN] = (int32_t)q_len;
  row[RECAP_SEQ_OUT_INDEX] = (int32_t)recap__seq_outputs(seq);
  row[RECAP_SEQ_SEED_LO] = (int32_t)(uint32_t)s->seed;
  row[RECAP_SEQ_SEED_HI] = (int32_t)(uint32_t)(s->seed >> 32);
  row[RECAP_SEQ_TOP_K] = s->top_k;
  row[RECAP_SEQ_TEMPERATURE] = float_bits(s->temperature);
  row[RECAP_SEQ_TOP_P] = float_bits(s->top_p);
  row[RECAP_SEQ_MIN_P] = float_bits(s->min_p);
  for (int64_t j = 0; j < width - RECAP_SEQ_BLOCKS; j++)
    row[RECAP_SEQ_BLOCKS + j] = j < seq->blocks.count ? seq->blocks.ids[j] : -1;
}

/* Copies the first n rows of a step tensor in: a bucketed one as the n rows of the run's
 * bucket (the engine zeroes the rest), another as its whole buffer of `capacity` rows. */
static recap_status copy_rows_in(recap_pipeline *p, const char *name, bool bucketed,
                                 const void *host, size_t row_bytes, int64_t n, int64_t capacity) {
  if (bucketed) return recap_pipeline_copy_in(p, name, host, row_bytes * (size_t)n, n);
  return recap_pipeline_copy_in(p, name, host, row_bytes * (size_t)capacity, 0);
}

/* Runs the entry on what its inputs hold (`tokens` real ones) and reads n samples back. With
 * a communicator the step is announced, then run by every rank (recap_pipeline_run_dist
 * brings rank 0's ids and seqs to the others). */
static recap_status run_entry(recap__runner *r, entry *e, int64_t tokens, int64_t n, int32_t *out,
                              bool *replayed) {
  int64_t batch = e->ids_bucketed ? tokens : 0;
  if (r->comm) {
    recap__step_kind kind = e == &r->prefill ? RECAP__STEP_PREFILL : RECAP__STEP_DECODE;
    RECAP_TRY(announce(r, kind, tokens, n, 0, recap_pipeline_stream(e->p)));
    RECAP_TRY(recap_pipeline_run_dist(e->p, r->comm, batch, 0));
  } else {
    RECAP_TRY(recap_pipeline_run(e->p, batch));
  }
  recap_pipeline_stats stats;
  RECAP_TRY(recap_pipeline_stats_get(e->p, &stats));
  *replayed = stats.replays > e->replays;
  e->replays = stats.replays;
  if (e->tokens_bucketed)
    RECAP_TRY(recap_pipeline_copy_out(e->p, "tokens", e->sampled, sizeof *out * (size_t)n, n));
  else
    RECAP_TRY(
        recap_pipeline_copy_out(e->p, "tokens", e->sampled, sizeof *out * (size_t)e->rows, 0));
  memcpy(out, e->sampled, sizeof *out * (size_t)n);
  return RECAP_OK;
}

recap_status recap__runner_prefill(recap__runner *r, const recap__step *step, int32_t *tokens,
                                   bool *replayed) {
  entry *e = &r->prefill;
  const int64_t width = r->shape.max_blocks_per_seq + RECAP_SEQ_BLOCKS;
  memset(e->seqs, 0, sizeof *e->seqs * (size_t)(e->rows * width));
  memset(e->ids, 0, sizeof *e->ids * (size_t)e->max_tokens);
  int64_t total = 0;
  for (int i = 0; i < step->num_chunks; i++) {
    const recap__chunk *c = &step->chunks[i];
    put_row(&e->seqs[i * width], width, c->seq, c->start + c->count, total, c->count);
    memcpy(&e->ids[total], &c->seq->tokens[c->start], sizeof *e->ids * (size_t)c->count);
    total += c->count;
  }
  recap_status st =
      copy_rows_in(e->p, "ids", e->ids_bucketed, e->ids, sizeof *e->ids, total, e->max_tokens);
  if (st == RECAP_OK)
    st = copy_rows_in(e->p, "seqs", e->seqs_bucketed, e->seqs, sizeof *e->seqs * (size_t)width,
                      step->num_chunks, e->rows);
  if (st == RECAP_OK) st = run_entry(r, e, total, step->num_chunks, tokens, replayed);
  if (st != RECAP_OK)
    return recap__error_context(
        st, "prefill step of %d sequences, %" PRId64 " tokens: ", step->num_chunks, total);
  return RECAP_OK;
}

/* Writes the decode rows' ids and seqs in. */
static recap_status decode_rows_in(recap__runner *r, const recap__step *step) {
  entry *e = &r->decode;
  const int64_t width = r->shape.max_blocks_per_seq + RECAP_SEQ_BLOCKS;
  const int64_t n = step->num_decode;
  memset(e->seqs, 0, sizeof *e->seqs * (size_t)(e->rows * width));
  for (int64_t i = 0; i < n; i++) {
    const recap__seq *seq = step->decode[i];
    /* The token it produced last goes in at the next position. */
    put_row(&e->seqs[i * width], width, seq, seq->computed + 1, i, 1);
    e->ids[i] = seq->tokens[seq->num_tokens - 1];
  }
  RECAP_TRY(copy_rows_in(e->p, "ids", e->ids_bucketed, e->ids, sizeof *e->ids, n, e->max_tokens));
  return copy_rows_in(e->p, "seqs", e->seqs_bucketed, e->seqs, sizeof *e->seqs * (size_t)width, n,
                      e->rows);
}

int64_t recap__runner_loop_max_steps(const recap__runner *r) {
  return r->loop ? r->loop_steps : 0;
}

recap_status recap__runner_loop_launch(recap__runner *r, const recap__sched *s,
                                       const recap__step *step, int64_t steps,
                                       bool return_on_stop) {
  const int64_t n = step->num_decode;
  for (int64_t i = 0; i < n; i++) {
    const recap__seq *seq = step->decode[i];
    recap_loop_limits *l = &r->limits[i];
    l->max_outputs = (int32_t)recap__seq_output_limit(s, seq);
    l->num_stop_ids = seq->num_stop_ids;
    memcpy(l->stop_ids, seq->stop_ids, sizeof *l->stop_ids * (size_t)seq->num_stop_ids);
  }
  recap_status st = decode_rows_in(r, step);
  /* The followers launch theirs on this header; the loop graph brings them the rest. */
  if (st == RECAP_OK && r->comm)
    st = announce(r, RECAP__STEP_LOOP, n, n, steps, recap_pipeline_stream(r->decode.p));
  if (st == RECAP_OK)
    st = recap_decode_loop_launch(r->loop, n, steps, r->limits,
                                  return_on_stop ? RECAP_LOOP_RETURN_ON_STOP : 0);
  if (st != RECAP_OK)
    return recap__error_context(
        st, "decode loop of %" PRId64 " sequences, up to %" PRId64 " steps: ", n, steps);
  return RECAP_OK;
}

recap_status recap__runner_loop_poll(recap__runner *r, recap_loop_token *out, size_t capacity,
                                     size_t *count, int *finished) {
  recap_status st = recap_decode_loop_poll(r->loop, out, capacity, count, finished);
  if (st != RECAP_OK) return recap__error_context(st, "decode loop: ");
  return RECAP_OK;
}

recap_status recap__runner_loop_wait(recap__runner *r, int64_t max_ns) {
  return recap_decode_loop_wait(r->loop, max_ns);
}

recap_status recap__runner_loop_return(recap__runner *r) {
  return recap_decode_loop_request_return(r->loop);
}

recap_status recap__runner_decode(recap__runner *r, const recap__step *step, int32_t *tokens,
                                  bool *replayed) {
  const int64_t n = step->num_decode;
  recap_status st = decode_rows_in(r, step);
  if (st == RECAP_OK) st = run_entry(r, &r->decode, n, n, tokens, replayed);
  if (st != RECAP_OK) return recap__error_context(st, "decode step of %" PRId64 " sequences: ", n);
  return RECAP_OK;
}

/* ---- tensor parallelism ---- */

recap_status recap__runner_keepalive(recap__runner *r) {
  recap_stream *s = recap_pipeline_stream(r->prefill.p);
  recap_status st = announce(r, RECAP__STEP_WAIT, 0, 0, 0, s);
  if (st == RECAP_OK) st = recap_comm_synchronize(r->comm, s);
  if (st != RECAP_OK) return recap__error_context(st, "telling the other ranks rank 0 is idle: ");
  return RECAP_OK;
}

recap_status recap__runner_receive(recap__runner *r, int64_t *words) {
  recap_stream *s = recap_pipeline_stream(r->prefill.p);
  RECAP_TRY(recap_comm_broadcast(r->comm, r->header_dev, r->header_dev, RECAP__STEP_WORDS,
                                 RECAP_DTYPE_I64, 0, s));
  RECAP_TRY(recap_memcpy_async(r->staged, r->header_dev, sizeof r->words, s));
  RECAP_TRY(recap_comm_synchronize(r->comm, s));
  memcpy(words, r->staged, sizeof r->words);
  return RECAP_OK;
}

/* A follower's decode loop: launched as rank 0's (its limits, ids and seqs arrive inside the
 * launch, so the follower's own are placeholders), waited for under the communicator's
 * timeout, and polled to its end, its tokens dropped (rank 0 hands out the same ones). */
static recap_status follow_loop(recap__runner *r, const recap__step_header *h) {
  recap_status st = RECAP_OK;
  if (!r->loop)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "rank 0 launched a decode loop but this rank has none: do all ranks run "
                    "the same RECAP_DECODE_LOOP?");
  if (st == RECAP_OK && (h->rows > r->decode.rows || h->steps > r->loop_steps))
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "rank 0's decode loop of %" PRId64 " rows and %" PRId64
                    " steps exceeds this rank's (%" PRId64 " rows, %" PRId64 " steps)",
                    h->rows, h->steps, r->decode.rows, r->loop_steps);
  bool launched = false;
  if (st == RECAP_OK) {
    memset(r->limits, 0, sizeof *r->limits * (size_t)r->decode.rows);
    st = recap_decode_loop_launch(r->loop, h->rows, h->steps, r->limits, 0);
    launched = st == RECAP_OK;
  }
  if (st == RECAP_OK) st = recap_comm_synchronize(r->comm, recap_pipeline_stream(r->decode.p));
  /* Polled to its end after a failed wait too: a failed wait has aborted the communicator or
   * met a device fault, and poll then ends the launch (reporting it), so the loop can go. */
  for (int finished = !launched; !finished;) {
    size_t got = 0;
    recap_status polled = recap_decode_loop_poll(
        r->loop, r->loop_drain, (size_t)(r->loop_steps * r->decode.rows), &got, &finished);
    if (polled != RECAP_OK) {
      if (st == RECAP_OK) st = polled;
      break;
    }
  }
  if (st != RECAP_OK)
    return recap__error_context(
        st, "decode loop %" PRId64 " (%" PRId64 " sequences, up to %" PRId64 " steps): ", h->index,
        h->rows, h->steps);
  return RECAP_OK;
}

static recap_status source_comm(void *ctx, recap__runner *r, int64_t *words) {
  (void)ctx;
  return recap__runner_receive(r, words);
}

recap_status recap__runner_follow(recap__runner *r, recap__step_source source, void *ctx,
                                  int64_t *runs) {
  if (!source) source = source_comm;
  *runs = 0;
  for (;;) {
    recap__step_header h;
    recap_status st = source(ctx, r, r->words);
    if (st == RECAP_OK) st = recap__step_header_decode(r->words, r->headers, &h);
    if (st != RECAP_OK)
      return recap__error_context(st, "waiting for rank 0's step %" PRId64 ": ", r->headers);
    r->headers++;
    if (h.kind == RECAP__STEP_STOP) return RECAP_OK;
    if (h.kind == RECAP__STEP_WAIT) continue;
    if (h.kind == RECAP__STEP_LOOP) {
      st = follow_loop(r, &h);
      if (st != RECAP_OK) return st;
      ++*runs;
      continue;
    }
    entry *e = h.kind == RECAP__STEP_PREFILL ? &r->prefill : &r->decode;
    st = recap_pipeline_run_dist(e->p, r->comm, e->ids_bucketed ? h.tokens : 0, 0);
    if (st != RECAP_OK)
      return recap__error_context(
          st, "%s step %" PRId64 " (%" PRId64 " tokens, %" PRId64 " sequences): ", e->name, h.index,
          h.tokens, h.rows);
    ++*runs;
  }
}
