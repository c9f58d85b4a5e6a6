/*
 * scheduler.c: continuous batching (see scheduler.h for the policy).
 */
#include "serve/scheduler.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

struct recap__sched {
  recap__sched_config config;
  recap__block_pool pool;
  recap__seq **running; /* by age, oldest first; max_running slots */
  int num_running;
  recap__seq *waiting_head, *waiting_tail;
  int64_t num_waiting;
  uint64_t preemptions;
  recap__step step;
  int64_t budget_left; /* while planning */
  int slots_left;
};

recap_status recap__sched_create(const recap__sched_config *config, recap__sched **out) {
  const recap__sched_config *c = config;
  if (c->num_blocks < 1 || c->num_blocks > INT32_MAX || c->block_size < 1 ||
      c->max_blocks_per_seq < 1 || c->max_running < 1 || c->prefill_budget < 1 ||
      c->prefill_seqs < 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "scheduler config: %lld blocks of %lld positions, %lld per sequence, %d "
                      "running, %lld prefill tokens from %d sequences: each must be positive",
                      (long long)c->num_blocks, (long long)c->block_size,
                      (long long)c->max_blocks_per_seq, c->max_running,
                      (long long)c->prefill_budget, c->prefill_seqs);
  recap__sched *s = calloc(1, sizeof *s);
  if (!s) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a scheduler");
  s->config = *c;
  recap_status st = recap__block_pool_init(&s->pool, c->num_blocks, c->block_size);
  s->running = calloc((size_t)c->max_running, sizeof *s->running);
  s->step.chunks = calloc((size_t)c->prefill_seqs, sizeof *s->step.chunks);
  s->step.decode = calloc((size_t)c->max_running, sizeof *s->step.decode);
  s->step.preempted = calloc((size_t)c->max_running, sizeof *s->step.preempted);
  if (st == RECAP_OK && (!s->running || !s->step.chunks || !s->step.decode || !s->step.preempted))
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a scheduler of %d sequences",
                    c->max_running);
  if (st != RECAP_OK) {
    recap__sched_destroy(s);
    return st;
  }
  *out = s;
  return RECAP_OK;
}

void recap__sched_destroy(recap__sched *s) {
  if (!s) return;
  recap__block_pool_free(&s->pool);
  free(s->running);
  free(s->step.chunks);
  free(s->step.decode);
  free(s->step.preempted);
  free(s);
}

/* ---- sequences ---- */

recap_status recap__seq_init(recap__seq *seq, const recap__sched *s, uint64_t order,
                             const int32_t *prompt, int64_t prompt_len, int64_t max_new,
                             const int32_t *stop_ids, int num_stop_ids) {
  const int64_t max_seq = s->config.max_blocks_per_seq * s->config.block_size;
  if (prompt_len < 1 || prompt_len > max_seq || max_new < 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "a sequence of %lld prompt tokens and %lld new ones cannot run (at least "
                      "one of each, and a prompt of at most %lld)",
                      (long long)prompt_len, (long long)max_new, (long long)max_seq);
  assert(num_stop_ids >= 0 && num_stop_ids <= RECAP_MAX_STOP_IDS);
  *seq = (recap__seq){.order = order,
                      .prompt_len = prompt_len,
                      .num_tokens = prompt_len,
                      .max_new = max_new,
                      .num_stop_ids = num_stop_ids};
  /* The last output is never fed back, so the cache holds one position less than the
   * longest token sequence; the prompt itself is always written. */
  int64_t longest = prompt_len + max_new < max_seq ? prompt_len + max_new : max_seq;
  seq->max_positions = longest - 1 > prompt_len ? longest - 1 : prompt_len;
  if (recap__blocks_for(&s->pool, seq->max_positions) > s->config.num_blocks)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "a sequence reaching %lld positions needs %lld KV blocks of %lld; the pool "
                      "has %lld",
                      (long long)seq->max_positions,
                      (long long)recap__blocks_for(&s->pool, seq->max_positions),
                      (long long)s->config.block_size, (long long)s->config.num_blocks);
  if (num_stop_ids) memcpy(seq->stop_ids, stop_ids, sizeof *stop_ids * (size_t)num_stop_ids);
  seq->tokens = malloc(sizeof *seq->tokens * (size_t)(prompt_len + max_new));
  recap_status st =
      seq->tokens
          ? recap__block_table_init(&seq->blocks, s->config.max_blocks_per_seq)
          : RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a sequence of %lld tokens",
                       (long long)(prompt_len + max_new));
  if (st != RECAP_OK) {
    free(seq->tokens);
    seq->tokens = NULL;
    return st;
  }
  memcpy(seq->tokens, prompt, sizeof *prompt * (size_t)prompt_len);
  return RECAP_OK;
}

void recap__seq_free(recap__seq *seq) {
  assert(seq->place == RECAP__SEQ_OUTSIDE && seq->blocks.count == 0);
  free(seq->tokens);
  recap__block_table_free(&seq->blocks);
  seq->tokens = NULL;
}

int64_t recap__seq_outputs(const recap__seq *seq) {
  return seq->num_tokens - seq->prompt_len;
}

/* ---- the waiting queue and the running set ---- */

static void waiting_push(recap__sched *s, recap__seq *seq, bool front) {
  seq->place = RECAP__SEQ_WAITING;
  seq->prev = front ? NULL : s->waiting_tail;
  seq->next = front ? s->waiting_head : NULL;
  if (seq->prev) seq->prev->next = seq;
  if (seq->next) seq->next->prev = seq;
  if (!seq->prev) s->waiting_head = seq;
  if (!seq->next) s->waiting_tail = seq;
  s->num_waiting++;
}

static void waiting_unlink(recap__sched *s, recap__seq *seq) {
  if (seq->prev)
    seq->prev->next = seq->next;
  else
    s->waiting_head = seq->next;
  if (seq->next)
    seq->next->prev = seq->prev;
  else
    s->waiting_tail = seq->prev;
  seq->prev = seq->next = NULL;
  seq->place = RECAP__SEQ_OUTSIDE;
  s->num_waiting--;
}

/* Inserted by age: a sequence admitted again after a preemption may be older than some that
 * kept running. */
static void running_insert(recap__sched *s, recap__seq *seq) {
  assert(s->num_running < s->config.max_running);
  int i = s->num_running++;
  for (; i > 0 && s->running[i - 1]->order > seq->order; i--) s->running[i] = s->running[i - 1];
  s->running[i] = seq;
  seq->place = RECAP__SEQ_RUNNING;
}

static void running_unlink(recap__sched *s, recap__seq *seq) {
  int i = 0;
  while (s->running[i] != seq) i++;
  memmove(&s->running[i], &s->running[i + 1],
          sizeof *s->running * (size_t)(s->num_running - i - 1));
  s->num_running--;
  seq->place = RECAP__SEQ_OUTSIDE;
}

void recap__sched_enqueue(recap__sched *s, recap__seq *seq) {
  assert(seq->place == RECAP__SEQ_OUTSIDE && seq->finish == RECAP_FINISH_NONE);
  assert(!s->waiting_tail || s->waiting_tail->order < seq->order);
  waiting_push(s, seq, false);
}

void recap__sched_remove(recap__sched *s, recap__seq *seq) {
  if (seq->place == RECAP__SEQ_WAITING)
    waiting_unlink(s, seq);
  else if (seq->place == RECAP__SEQ_RUNNING)
    running_unlink(s, seq);
  recap__blocks_release(&s->pool, &seq->blocks);
}

/* ---- planning ---- */

static void preempt(recap__sched *s, recap__seq *seq) {
  running_unlink(s, seq);
  recap__blocks_release(&s->pool, &seq->blocks);
  seq->computed = 0;
  seq->prefilled = false;
  seq->preemptions++;
  s->preemptions++;
  waiting_push(s, seq, true);
  s->step.preempted[s->step.num_preempted++] = seq;
}

static void add_chunk(recap__sched *s, recap__seq *seq) {
  int64_t count = seq->num_tokens - seq->computed;
  if (count > s->budget_left) count = s->budget_left;
  s->step.chunks[s->step.num_chunks++] = (recap__chunk){
      .seq = seq,
      .start = seq->computed,
      .count = count,
      .completes = seq->computed + count == seq->num_tokens,
  };
  s->step.prefill_tokens += count;
  s->budget_left -= count;
  s->slots_left--;
}

const recap__step *recap__sched_plan(recap__sched *s) {
  recap__step *step = &s->step;
  step->num_chunks = step->num_decode = step->num_preempted = 0;
  step->prefill_tokens = 0;
  /* 1. Decoding sequences' next positions. The victim is always at or after i (the newest),
   * so the sequences before i keep the blocks they were given. */
  for (int i = 0; i < s->num_running;) {
    recap__seq *seq = s->running[i];
    if (!seq->prefilled || recap__blocks_cover(&s->pool, &seq->blocks, seq->computed + 1))
      i++;
    else
      preempt(s, s->running[s->num_running - 1]);
  }
  for (int i = 0; i < s->num_running; i++)
    if (s->running[i]->prefilled) step->decode[step->num_decode++] = s->running[i];
  /* 2. Prefills under way. */
  s->budget_left = s->config.prefill_budget;
  s->slots_left = s->config.prefill_seqs;
  for (int i = 0; i < s->num_running && s->budget_left > 0 && s->slots_left > 0; i++)
    if (!s->running[i]->prefilled) add_chunk(s, s->running[i]);
  /* 3. Admission, first in first out. */
  while (s->waiting_head && s->num_running < s->config.max_running && s->budget_left > 0 &&
         s->slots_left > 0) {
    recap__seq *seq = s->waiting_head;
    int64_t positions = seq->num_tokens + 1;
    if (positions > seq->max_positions) positions = seq->max_positions;
    if (!recap__blocks_cover(&s->pool, &seq->blocks, positions)) break;
    waiting_unlink(s, seq);
    running_insert(s, seq);
    add_chunk(s, seq);
  }
  return step;
}

/* Appends one output and decides whether the sequence has ended. */
static void take_output(recap__sched *s, recap__seq *seq, int32_t token) {
  seq->tokens[seq->num_tokens++] = token;
  const int64_t max_seq = s->config.max_blocks_per_seq * s->config.block_size;
  for (int k = 0; k < seq->num_stop_ids && seq->finish == RECAP_FINISH_NONE; k++)
    if (seq->stop_ids[k] == token) seq->finish = RECAP_FINISH_STOP;
  if (seq->finish == RECAP_FINISH_NONE && recap__seq_outputs(seq) >= seq->max_new)
    seq->finish = RECAP_FINISH_MAX_TOKENS;
  if (seq->finish == RECAP_FINISH_NONE && seq->num_tokens >= max_seq)
    seq->finish = RECAP_FINISH_LENGTH;
}

void recap__sched_complete(recap__sched *s, const int32_t *prefill_tokens,
                           const int32_t *decode_tokens) {
  const recap__step *step = &s->step;
  for (int i = 0; i < step->num_chunks; i++) {
    recap__seq *seq = step->chunks[i].seq;
    seq->computed += step->chunks[i].count;
    if (!step->chunks[i].completes) continue;
    seq->prefilled = true;
    take_output(s, seq, prefill_tokens[i]);
  }
  for (int i = 0; i < step->num_decode; i++) {
    step->decode[i]->computed += 1;
    take_output(s, step->decode[i], decode_tokens[i]);
  }
  int kept = 0;
  for (int i = 0; i < s->num_running; i++) {
    recap__seq *seq = s->running[i];
    if (seq->finish == RECAP_FINISH_NONE) {
      s->running[kept++] = seq;
      continue;
    }
    seq->place = RECAP__SEQ_OUTSIDE;
    recap__blocks_release(&s->pool, &seq->blocks);
  }
  s->num_running = kept;
}

bool recap__sched_idle(const recap__sched *s) {
  return s->num_running == 0 && s->num_waiting == 0;
}

recap__sched_counts recap__sched_counts_get(const recap__sched *s) {
  return (recap__sched_counts){
      .running = s->num_running,
      .waiting = s->num_waiting,
      .blocks_used = s->pool.num_blocks - s->pool.num_free,
      .blocks_peak = s->pool.peak_used,
      .preemptions = s->preemptions,
  };
}

int64_t recap__seq_output_limit(const recap__sched *s, const recap__seq *seq) {
  const int64_t max_seq = s->config.max_blocks_per_seq * s->config.block_size;
  return seq->max_new < max_seq - seq->prompt_len ? seq->max_new : max_seq - seq->prompt_len;
}

/* Positions a decode row must hold for k more steps from where it is. */
static int64_t loop_positions(const recap__seq *seq, int64_t k) {
  int64_t positions = seq->computed + k;
  return positions < seq->max_positions ? positions : seq->max_positions;
}

int64_t recap__sched_reserve_steps(recap__sched *s, int64_t max_steps) {
  const recap__step *step = &s->step;
  int64_t k = 1;
  for (int i = 0; i < step->num_decode; i++) {
    const recap__seq *seq = step->decode[i];
    int64_t left = recap__seq_output_limit(s, seq) - recap__seq_outputs(seq);
    if (left > k) k = left;
  }
  if (k > max_steps) k = max_steps;
  for (; k > 1; k--) {
    int64_t needed = 0;
    for (int i = 0; i < step->num_decode; i++) {
      const recap__seq *seq = step->decode[i];
      int64_t more = recap__blocks_for(&s->pool, loop_positions(seq, k)) - seq->blocks.count;
      if (more > 0) needed += more;
    }
    if (needed <= s->pool.num_free) break;
  }
  for (int i = 0; i < step->num_decode; i++) {
    bool covered =
        recap__blocks_cover(&s->pool, &step->decode[i]->blocks, loop_positions(step->decode[i], k));
    assert(covered); /* counted above */
    (void)covered;
  }
  return k;
}
