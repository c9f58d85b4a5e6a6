/* bench_loop.c: `recap bench-loop SPEC`: the decode loop (docs/SERVING.md, "The decode loop")
 * against one graph launch per decode step, on a paged serving spec's decode entry.
 *
 * Per batch, --tokens greedy decode steps from a context of --context keys, five ways:
 *   step-sync   one replay per step, its tokens read back before the next is launched, the
 *               wait a sleep-poll of the step's event (--poll-us between looks);
 *   step-block  the same with a blocking wait (an event made with RECAP_EVENT_BLOCKING, i.e.
 *               cudaEventBlockingSync, and recap_event_synchronize: the thread sleeps in the
 *               driver until the GPU signals it);
 *   step-ahead  step N + 1 enqueued before step N's tokens are read (a copy of the tokens into
 *               pinned memory and an event per step; decode_advance feeds each step's tokens
 *               to the next on the device, so nothing waits for the host), sleep-poll wait;
 *   loop        decode loops of --steps steps per launch, the tokens read from the ring as
 *               they arrive, waited for with recap_decode_loop_wait (sleeps until the next
 *               step is due, then looks every 1/16 step);
 *   loop-poll   the same loops read with the sleep-poll of the step modes.
 * The thread's timer slack is 1 us (prctl) for every mode, so a sleep ends when asked. Reported
 * per mode: wall time per step (the
 * per-token latency of each sequence), tokens/s, process CPU time (getrusage, user + sys, all
 * threads) and voluntary context switches (the sleeps and blocking waits: wake-ups) per token; for
 * the loop also the GPU's idle gap between consecutive steps (each step's start and end stamped
 * with %globaltimer by the body; a second loop created with timestamps, whose publish kernel,
 * beside the step in every loop, stamps the step's start: the two loops run the same nodes; it
 * runs the timed runs' --tokens steps from the same context, so its steps are theirs) and the
 * delay from a token's device stamp to its arrival on the host, after calibrating the two
 * clocks' offset on single-step launches (the smallest observed difference counts as zero
 * delay: the delays are above the fastest delivery seen). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep, clock_gettime, getrusage under -std=c11 */
#endif
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "cli/cli.h"
#include "cli/decode_batch.h"
#include "cli/tensors.h"
#include "runtime/error.h"

static const char *const CMD = "bench-loop";

enum { MAX_BATCHES = 16, CALIBRATIONS = 50 };

static const cli_option bench_loop_options[] = {
    {.flag = "--batch",
     .value = "LIST",
     .kind = CLI_VALUE_TEXT,
     .help = "batch sizes (default 1,8, those up to the spec's largest)"},
    {.flag = "--context",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "keys per sequence before the first timed step (default 128, or\n"
             "as many as the spec's sequences hold with --tokens after them)"},
    {.flag = "--tokens",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "decode steps per timing (default 256, or half the positions of a shorter spec)"},
    {.flag = "--steps",
     .value = "K",
     .kind = CLI_VALUE_TEXT,
     .help = "decode steps per loop launch (default 32)"},
    {.flag = "--poll-us",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "microseconds between looks at an event or the ring in the\n"
             "sleep-poll modes (default 20)"},
    {.flag = "--repeats",
     .value = "N",
     .kind = CLI_VALUE_TEXT,
     .help = "timings per batch and mode; the median is reported (default 3)"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host (default cuda, else the host with a note)"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names must lie under DIR"},
    {.flag = "--json",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write the results as JSON (- for stdout: the text then goes\n"
             "to stderr); it records the GPU, driver and library versions"},
    {0}};
const cli_help cli_bench_loop_help = {
    .synopsis =
        "recap bench-loop SPEC [--batch 1,8] [--context N] [--tokens N] [--steps K]\n"
        "                 [--poll-us N] [--repeats N] [--device cuda|host]\n"
        "                 [--base-dir DIR] [--json FILE]",
    .description =
        "Times the decode loop (many decode steps per graph launch, a WHILE node) against one\n"
        "launch per step, on the decode entry of a paged serving spec: per batch, wall time per\n"
        "step, tokens/s, host CPU time and sleeps (voluntary context switches) per token for\n"
        "one replay per step with a wait per step (a sleep-poll, step-sync, or a blocking event\n"
        "wait, step-block), for step N + 1 enqueued before step N's tokens are read\n"
        "(step-ahead), and for loops read with recap_decode_loop_wait (loop) or the sleep-poll\n"
        "(loop-poll); for the loop also the GPU's median idle gap between steps and the p50/p99\n"
        "delay of a token from the device to the host.",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = bench_loop_options}},
};

typedef struct {
  const char *path, *device, *base_dir, *json_path;
  long long batches[MAX_BATCHES];
  size_t num_batches;
  long long context, tokens, steps, poll_us, repeats;
  bool batch_given, context_given, tokens_given; /* else fitted to the spec
                                                   (cli_decode_fit_defaults) */
} loop_args;

static int parse_args(int argc, char **argv, loop_args *a) {
  *a = (loop_args){.context = 128, .tokens = 256, .steps = 32, .poll_us = 20, .repeats = 3};
  a->num_batches = 2;
  a->batches[0] = 1;
  a->batches[1] = 8;
  for (int i = 0; i < argc; i++) {
    int m;
    const char *v;
    if ((m = cli_flag(CMD, argc, argv, &i, "--device", &a->device)) != 0 ||
        (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &a->base_dir)) != 0 ||
        (m = cli_json_flag(CMD, argc, argv, &i, &a->json_path)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (m < 0 || !cli_parse_int_list(CMD, "--batch", v, 1, 1 << 20, a->batches, MAX_BATCHES,
                                       &a->num_batches, "1,8"))
        return CLI_EXIT_USAGE;
      a->batch_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--context", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--context", v, 1, 1 << 24, &a->context))
        return CLI_EXIT_USAGE;
      a->context_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--tokens", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--tokens", v, 1, 1 << 20, &a->tokens))
        return CLI_EXIT_USAGE;
      a->tokens_given = true;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--steps", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--steps", v, 1, 4096, &a->steps)) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--poll-us", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--poll-us", v, 0, 100000, &a->poll_us))
        return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--repeats", &v)) != 0) {
      if (m < 0 || !cli_parse_int(CMD, "--repeats", v, 1, 1000, &a->repeats)) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &a->path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!a->path) {
    fprintf(stderr, "recap %s: usage: recap bench-loop SPEC (see --help)\n", CMD);
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* ---- clocks ---- */

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The process's CPU time (user + sys) and voluntary context switches (each a sleep or a
 * blocking wait that gave up the CPU: how often a waiting mode wakes), every thread. */
typedef struct {
  double cpu_s, switches;
} usage;

static usage usage_now(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return (usage){(double)u.ru_utime.tv_sec + (double)u.ru_utime.tv_usec * 1e-6 +
                     (double)u.ru_stime.tv_sec + (double)u.ru_stime.tv_usec * 1e-6,
                 (double)u.ru_nvcsw};
}

static void poll_pause(const loop_args *a) {
  if (a->poll_us > 0) nanosleep(&(struct timespec){.tv_nsec = a->poll_us * 1000}, NULL);
}

/* Waits for an event: a blocking one (step-block) with recap_event_synchronize, else with the
 * sleep-poll. */
static recap_status wait_event(recap_event *e, const loop_args *a, bool blocking) {
  if (blocking) return recap_event_synchronize(e);
  for (;;) {
    recap_status st = recap_event_query(e);
    if (st != RECAP_STATUS_NOT_READY) return st;
    poll_pause(a);
  }
}

/* ---- the decode entry ---- */

/* The synthetic batch, in place before anything is timed: the loop modes launch on their own
 * schedule, and a copy still queued would land inside the first timed step. */
static recap_status write_batch(recap_pipeline *p, const cli_decode_shape *s, int64_t batch,
                                int64_t context, int64_t need) {
  recap_status st = cli_decode_batch_write(p, s, batch, context, need);
  if (st == RECAP_OK) st = recap_stream_synchronize(recap_pipeline_stream(p));
  return st;
}

/* ---- the three modes ---- */

typedef struct {
  double wall_ms;          /* per step */
  double cpu_us, switches; /* per token */
} timing;

/* A mode's timing from its start (u0, w0 on now_ns) to now, over `tokens` tokens in `steps`
 * steps. */
static void finish_timing(timing *t, usage u0, uint64_t w0, long long steps, double tokens) {
  const usage u = usage_now();
  t->wall_ms = (double)(now_ns() - w0) * 1e-6 / (double)steps;
  t->cpu_us = (u.cpu_s - u0.cpu_s) * 1e6 / tokens;
  t->switches = (u.switches - u0.switches) / tokens;
}

/* One replay per step; its tokens copied out (which waits) before the next launch. */
static recap_status time_step_sync(recap_pipeline *p, int64_t batch, const loop_args *a,
                                   int32_t *host_tokens, recap_event *done, bool blocking,
                                   timing *t) {
  const usage u0 = usage_now();
  uint64_t w0 = now_ns();
  recap_status st = RECAP_OK;
  recap_tensor tokens;
  st = recap_pipeline_tensor(p, "tokens", &tokens);
  for (long long k = 0; st == RECAP_OK && k < a->tokens; k++) {
    recap_stream *s = recap_pipeline_stream(p);
    st = recap_pipeline_run_async(p, batch, NULL);
    if (st == RECAP_OK)
      st = recap_memcpy_async(host_tokens, tokens.data, sizeof(int32_t) * (size_t)batch, s);
    if (st == RECAP_OK) st = recap_event_record(done, s);
    if (st == RECAP_OK) st = wait_event(done, a, blocking);
  }
  finish_timing(t, u0, w0, a->tokens, (double)(a->tokens * batch));
  return st;
}

/* Step N + 1 enqueued before step N's tokens are waited for (two pinned buffers, two events). */
static recap_status time_step_ahead(recap_pipeline *p, int64_t batch, const loop_args *a,
                                    int32_t *host_tokens[2], recap_event *done[2], timing *t) {
  const usage u0 = usage_now();
  uint64_t w0 = now_ns();
  recap_tensor tokens;
  recap_status st = recap_pipeline_tensor(p, "tokens", &tokens);
  recap_stream *s = recap_pipeline_stream(p);
  for (long long k = 0; st == RECAP_OK && k <= a->tokens; k++) {
    if (k < a->tokens) {
      st = recap_pipeline_run_async(p, batch, NULL);
      if (st == RECAP_OK)
        st =
            recap_memcpy_async(host_tokens[k % 2], tokens.data, sizeof(int32_t) * (size_t)batch, s);
      if (st == RECAP_OK) st = recap_event_record(done[k % 2], s);
    }
    if (st == RECAP_OK && k > 0) st = wait_event(done[(k - 1) % 2], a, false);
  }
  finish_timing(t, u0, w0, a->tokens, (double)(a->tokens * batch));
  return st;
}

/* Each step's GPU time and the idle gap to the next step of the same launch (us), appended
 * launch by launch from a loop created with timestamps. */
typedef struct {
  double *steps, *gaps;
  size_t num_steps, num_gaps;
} stamp_log;

static recap_status log_stamps(recap_decode_loop *loop, stamp_log *log) {
  const uint64_t *stamps = NULL;
  int64_t ran = 0;
  RECAP_TRY(recap_decode_loop_stamps(loop, &stamps, &ran));
  for (int64_t i = 0; i < ran; i++) {
    log->steps[log->num_steps++] = (double)(stamps[2 * i + 1] - stamps[2 * i]) * 1e-3;
    if (i + 1 < ran)
      log->gaps[log->num_gaps++] = ((double)stamps[2 * i + 2] - (double)stamps[2 * i + 1]) * 1e-3;
  }
  return RECAP_OK;
}

/* Loops of --steps until --tokens steps have run, waited for with recap_decode_loop_wait
 * (adaptive) or the sleep-poll; every entry's arrival time minus its device stamp into
 * delays[] (ns, before the offset), when delays is not NULL; every launch's step stamps into
 * log, when it is not NULL. */
static recap_status time_loop(recap_decode_loop *loop, int64_t batch, const loop_args *a,
                              bool adaptive, const recap_loop_limits *limits,
                              recap_loop_token *entries, size_t capacity, double *delays,
                              size_t *num_delays, stamp_log *log, timing *t) {
  const usage u0 = usage_now();
  uint64_t w0 = now_ns();
  recap_status st = RECAP_OK;
  long long left = a->tokens;
  if (num_delays) *num_delays = 0;
  while (st == RECAP_OK && left > 0) {
    long long k = left < a->steps ? left : a->steps;
    st = recap_decode_loop_launch(loop, batch, k, limits, 0);
    int finished = 0;
    while (st == RECAP_OK && !finished) {
      size_t n = 0;
      st = recap_decode_loop_poll(loop, entries, capacity, &n, &finished);
      uint64_t arrived = now_ns();
      for (size_t i = 0; delays && i < n; i++)
        delays[(*num_delays)++] = (double)arrived - (double)entries[i].time_ns;
      if (st == RECAP_OK && !finished && n == 0) {
        if (adaptive)
          st = recap_decode_loop_wait(loop, 1000000000);
        else
          poll_pause(a);
      }
    }
    if (st == RECAP_OK && log) st = log_stamps(loop, log);
    left -= k;
  }
  finish_timing(t, u0, w0, a->tokens, (double)(a->tokens * batch));
  return st;
}

/* The host clock minus the device clock, as the smallest difference seen between a token's
 * arrival (spinning on the ring) and its stamp over single-step launches. */
static recap_status calibrate(recap_decode_loop *loop, const recap_loop_limits *limits,
                              recap_loop_token *entries, size_t capacity, double *offset_ns) {
  *offset_ns = 0;
  bool first = true;
  for (int c = 0; c < CALIBRATIONS; c++) {
    RECAP_TRY(recap_decode_loop_launch(loop, 1, 1, limits, 0));
    int finished = 0;
    while (!finished) {
      size_t n = 0;
      RECAP_TRY(recap_decode_loop_poll(loop, entries, capacity, &n, &finished));
      uint64_t arrived = now_ns();
      for (size_t i = 0; i < n; i++) {
        double d = (double)arrived - (double)entries[i].time_ns;
        if (first || d < *offset_ns) *offset_ns = d;
        first = false;
      }
    }
  }
  return RECAP_OK;
}

enum { STEP_SYNC, STEP_BLOCK, STEP_AHEAD, LOOP, LOOP_POLL, NUM_MODES };
static const char *const MODE_NAMES[NUM_MODES] = {"step-sync", "step-block", "step-ahead", "loop",
                                                  "loop-poll"};
static const char *const MODE_KEYS[NUM_MODES] = {"step_sync", "step_block", "step_ahead", "loop",
                                                 "loop_poll"};

typedef struct {
  int64_t batch;
  timing modes[NUM_MODES];
  double delay_us_p50[2], delay_us_p99[2]; /* loop, loop-poll */
  double gap_us_median, gap_us_p90, step_us_median;
} loop_result;

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double percentile(double *v, size_t n, double q) {
  if (n == 0) return 0;
  qsort(v, n, sizeof *v, cmp_double);
  return v[(size_t)(q * (double)(n - 1) + 0.5)];
}

/* One timing of mode m from fresh metadata. */
static recap_status time_mode(int m, recap_pipeline *p, recap_decode_loop *loop,
                              const cli_decode_shape *s, int64_t batch, const loop_args *a,
                              int64_t need, int32_t *bufs[2], recap_event *done[2],
                              recap_event *blocking, const recap_loop_limits *limits,
                              recap_loop_token *entries, size_t capacity, double *delays,
                              size_t *num_delays, timing *t) {
  RECAP_TRY(write_batch(p, s, batch, a->context, need));
  switch (m) {
    case STEP_SYNC:
      return time_step_sync(p, batch, a, bufs[0], done[0], false, t);
    case STEP_BLOCK:
      return time_step_sync(p, batch, a, bufs[0], blocking, true, t);
    case STEP_AHEAD:
      return time_step_ahead(p, batch, a, bufs, done, t);
    default:
      return time_loop(loop, batch, a, m == LOOP, limits, entries, capacity, delays, num_delays,
                       NULL, t);
  }
}

/* Medians over repeats, each mode from fresh metadata. */
static recap_status run_batch(recap_pipeline *p, recap_decode_loop *loop,
                              recap_decode_loop *stamped, const cli_decode_shape *s, int64_t batch,
                              const loop_args *a, loop_result *r) {
  const int64_t need = (a->context + a->tokens + 2 + s->block_size - 1) / s->block_size;
  const size_t capacity = (size_t)(a->steps * batch);
  const size_t per_timing = (size_t)(a->tokens * batch);
  recap_loop_limits *limits = calloc((size_t)batch, sizeof *limits);
  recap_loop_token *entries = calloc(capacity, sizeof *entries);
  double *samples = calloc((size_t)(NUM_MODES * a->repeats), sizeof *samples);
  double *delays = calloc(2 * per_timing, sizeof *delays);
  double *gaps = calloc((size_t)a->tokens, sizeof *gaps),
         *steps = calloc((size_t)a->tokens, sizeof *steps);
  int32_t *pinned = NULL;
  recap_event *done[2] = {NULL, NULL}, *blocking = NULL;
  recap_pipeline_info info;
  recap_status st = limits && entries && samples && delays && gaps && steps
                        ? recap_pipeline_info_get(p, &info)
                        : RECAP_STATUS_OUT_OF_MEMORY;
  for (int64_t b = 0; b < batch && limits; b++) limits[b].max_outputs = INT32_MAX;
  if (st == RECAP_OK) st = recap_host_malloc(2 * sizeof(int32_t) * (size_t)batch, (void **)&pinned);
  if (st == RECAP_OK) st = recap_event_create(info.device, 0, &done[0]);
  if (st == RECAP_OK) st = recap_event_create(info.device, 0, &done[1]);
  if (st == RECAP_OK) st = recap_event_create(info.device, RECAP_EVENT_BLOCKING, &blocking);
  int32_t *bufs[2] = {pinned, pinned ? pinned + batch : NULL};
  double cpu[NUM_MODES] = {0}, switches[NUM_MODES] = {0};
  size_t num_delays[2] = {0, 0};
  /* Untimed first runs: the replay path and the loop's first launch. */
  if (st == RECAP_OK) st = write_batch(p, s, batch, a->context, need);
  if (st == RECAP_OK) st = recap_pipeline_run(p, batch);
  for (long long rep = 0; st == RECAP_OK && rep < a->repeats; rep++) {
    for (int m = 0; st == RECAP_OK && m < NUM_MODES; m++) {
      timing t = {0, 0, 0};
      double *d = m >= LOOP ? delays + (size_t)(m - LOOP) * per_timing : NULL;
      st = time_mode(m, p, loop, s, batch, a, need, bufs, done, blocking, limits, entries, capacity,
                     d, d ? &num_delays[m - LOOP] : NULL, &t);
      samples[m * a->repeats + rep] = t.wall_ms;
      cpu[m] += t.cpu_us / (double)a->repeats;
      switches[m] += t.switches / (double)a->repeats;
    }
  }
  /* The delays of the last repeat, above the fastest delivery seen. */
  if (st == RECAP_OK) {
    double offset = 0;
    st = write_batch(p, s, 1, a->context, need);
    if (st == RECAP_OK) st = calibrate(loop, limits, entries, capacity, &offset);
    for (int k = 0; k < 2; k++) {
      double *d = delays + (size_t)k * per_timing;
      for (size_t i = 0; i < num_delays[k]; i++) d[i] -= offset;
      r->delay_us_p50[k] = percentile(d, num_delays[k], 0.5) * 1e-3;
      r->delay_us_p99[k] = percentile(d, num_delays[k], 0.99) * 1e-3;
    }
  }
  /* The GPU's steps and the gaps between them, from the loop whose publish kernel stamps each
   * step's start, over the timed runs' steps (the same contexts, every launch). */
  stamp_log log = {.steps = steps, .gaps = gaps};
  if (st == RECAP_OK) st = write_batch(p, s, batch, a->context, need);
  if (st == RECAP_OK) {
    timing unused;
    st = time_loop(stamped, batch, a, true, limits, entries, capacity, NULL, NULL, &log, &unused);
  }
  r->gap_us_median = percentile(gaps, log.num_gaps, 0.5);
  r->gap_us_p90 = percentile(gaps, log.num_gaps, 0.9);
  r->step_us_median = percentile(steps, log.num_steps, 0.5);
  for (int m = 0; st == RECAP_OK && m < NUM_MODES; m++) {
    cli_summary sum;
    cli_summarize(samples + m * a->repeats, (int)a->repeats, &sum);
    r->modes[m] = (timing){sum.median, cpu[m], switches[m]};
  }
  recap_event_destroy(done[0]);
  recap_event_destroy(done[1]);
  recap_event_destroy(blocking);
  recap_host_free(pinned);
  free(limits);
  free(entries);
  free(samples);
  free(delays);
  free(gaps);
  free(steps);
  return st;
}

static json_t *mode_json(const timing *t, int64_t batch) {
  return json_pack("{sf sf sf sf}", "ms_per_step", t->wall_ms, "tokens_per_s",
                   (double)batch / (t->wall_ms * 1e-3), "cpu_us_per_token", t->cpu_us,
                   "sleeps_per_token", t->switches);
}

static int run(const loop_args *a, recap_pipeline *p, const cli_decode_shape *s) {
  int64_t positions = a->context + a->tokens + 2;
  for (size_t i = 0; i < a->num_batches; i++)
    if (!cli_decode_batch_fits(CMD, s, a->batches[i], positions)) return CLI_EXIT_FAILURE;
  recap_decode_loop *loop = NULL, *stamped = NULL;
  recap_status st = recap_decode_loop_create(p, a->steps, 0, &loop);
  if (st == RECAP_OK) st = recap_decode_loop_create(p, a->steps, 1, &stamped);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the decode loop", st);
    recap_decode_loop_destroy(loop);
    return CLI_EXIT_FAILURE;
  }
#if defined(__linux__)
  /* Every mode's sleeps end when asked (the default slack lets them run 50 us late). */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  printf(
      "%s: context %lld, %lld %s per timing, loops of %lld %s, sleep-polls every %lld us, "
      "median of %lld\n\n",
      a->path, a->context, a->tokens, cli_plural(a->tokens, "step", "steps"), a->steps,
      cli_plural(a->steps, "step", "steps"), a->poll_us, a->repeats);
  printf("%6s %-11s %12s %10s %14s %14s\n", "batch", "mode", "ms/step", "tokens/s", "CPU us/token",
         "sleeps/token");
  json_t *rows = json_array();
  int rc = rows ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
  for (size_t i = 0; rc == CLI_EXIT_OK && i < a->num_batches; i++) {
    loop_result r = {.batch = a->batches[i]};
    st = run_batch(p, loop, stamped, s, r.batch, a, &r);
    if (st != RECAP_OK) {
      cli_report_failure(CMD, "the timings", st);
      rc = CLI_EXIT_FAILURE;
      break;
    }
    const timing *t = r.modes;
    for (int m = 0; m < NUM_MODES; m++)
      printf("%6" PRId64 " %-11s %12.4f %10.0f %14.2f %14.2f\n", r.batch, MODE_NAMES[m],
             t[m].wall_ms, (double)r.batch / (t[m].wall_ms * 1e-3), t[m].cpu_us, t[m].switches);
    printf(
        "%6s loop: %.4f of step-sync, %.4f of step-block, %.4f of step-ahead; CPU %.3f of "
        "step-sync, %.3f of step-block (loop-poll: %.3f of step-sync)\n"
        "%6s GPU step %.1f us, gap between steps median %.2f us (p90 %.2f); token delivery "
        "p50 %.1f us, p99 %.1f us (loop-poll: %.1f, %.1f us)\n",
        "", t[LOOP].wall_ms / t[STEP_SYNC].wall_ms, t[LOOP].wall_ms / t[STEP_BLOCK].wall_ms,
        t[LOOP].wall_ms / t[STEP_AHEAD].wall_ms, t[LOOP].cpu_us / t[STEP_SYNC].cpu_us,
        t[LOOP].cpu_us / t[STEP_BLOCK].cpu_us, t[LOOP_POLL].cpu_us / t[STEP_SYNC].cpu_us, "",
        r.step_us_median, r.gap_us_median, r.gap_us_p90, r.delay_us_p50[0], r.delay_us_p99[0],
        r.delay_us_p50[1], r.delay_us_p99[1]);
    json_t *row =
        json_pack("{sI sf sf sf sf sf sf sf}", "batch", (json_int_t)r.batch, "gpu_step_us_median",
                  r.step_us_median, "gpu_gap_us_median", r.gap_us_median, "gpu_gap_us_p90",
                  r.gap_us_p90, "delivery_us_p50", r.delay_us_p50[0], "delivery_us_p99",
                  r.delay_us_p99[0], "loop_poll_delivery_us_p50", r.delay_us_p50[1],
                  "loop_poll_delivery_us_p99", r.delay_us_p99[1]);
    for (int m = 0; row && m < NUM_MODES; m++)
      json_object_set_new(row, MODE_KEYS[m], mode_json(&t[m], r.batch));
    json_array_append_new(rows, row);
  }
  recap_pipeline_info info;
  if (rc == CLI_EXIT_OK && a->json_path && recap_pipeline_info_get(p, &info) == RECAP_OK) {
    json_t *root =
        json_pack("{ss sI sI sI sI so}", "spec", a->path, "context", (json_int_t)a->context,
                  "tokens", (json_int_t)a->tokens, "steps", (json_int_t)a->steps, "poll_us",
                  (json_int_t)a->poll_us, "results", rows);
    rows = NULL;
    if (!cli_write_json(CMD, root, info.device, a->json_path)) rc = CLI_EXIT_FAILURE;
    json_decref(root);
  }
  json_decref(rows);
  recap_decode_loop_destroy(stamped);
  recap_decode_loop_destroy(loop);
  return rc;
}

int cli_bench_loop_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_bench_loop_help);
    return CLI_EXIT_OK;
  }
  loop_args a;
  int rc = parse_args(argc, argv, &a);
  if (rc != CLI_EXIT_OK) return rc;
  recap_pipeline_options o = {.struct_size = sizeof o,
                              .entry = "decode",
                              .base_dir = a.base_dir,
                              .override_device = 1,
                              .override_mode = 1,
                              .mode = RECAP_MODE_GRAPH,
                              .oversize = RECAP_OVERSIZE_FAIL};
  if (!cli_pick_device(CMD, a.device, RECAP_BACKEND_CUDA, &o.device)) return CLI_EXIT_USAGE;
  recap_pipeline *p = NULL;
  recap_status st = recap_pipeline_create_file(a.path, &o, &p);
  if (st != RECAP_OK) {
    cli_report_failure(CMD, "the decode entry", st);
    return CLI_EXIT_FAILURE;
  }
  cli_decode_shape s;
  rc = CLI_EXIT_FAILURE;
  if (cli_decode_shape_read(CMD, p, &s)) {
    /* run() counts two positions past the timed steps (the loop's lookahead). */
    cli_decode_fit_defaults(CMD, &s, a.batch_given, a.batches, &a.num_batches, a.context_given,
                            &a.context, a.tokens_given, &a.tokens, 2);
    rc = run(&a, p, &s);
  }
  recap_pipeline_destroy(p);
  return rc;
}
