/*
 * request.c: checking and keeping generation requests (see request.h).
 */
#include "serve/request.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/error.h"
#include "runtime/struct_size.h"

/* Messages name the field as the caller wrote it: "request.top_k = -1: ...". */
#define REFUSE(...) RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static recap_status check_sampling(const recap_request *r) {
  if (!isfinite(r->temperature) || r->temperature < 0)
    return REFUSE("request.temperature = %g: must be finite and >= 0 (0: greedy)",
                  (double)r->temperature);
  if (!(r->top_p >= 0 && r->top_p <= 1))
    return REFUSE("request.top_p = %g: outside [0, 1] (0 or 1: off)", (double)r->top_p);
  if (r->top_k < 0) return REFUSE("request.top_k = %d: negative (0: off)", r->top_k);
  if (!(r->min_p >= 0 && r->min_p <= 1))
    return REFUSE("request.min_p = %g: outside [0, 1] (0: off)", (double)r->min_p);
  return RECAP_OK;
}

recap_status recap_request_check(const recap_request *request, int64_t vocab, int64_t max_seq) {
  if (!request) return REFUSE("request is NULL");
  if (vocab < 1 || max_seq < 1)
    return REFUSE("a model of %" PRId64 " token ids and a maximum sequence of %" PRId64
                  " tokens: both must be at least 1",
                  vocab, max_seq);
  recap_request copy;
  RECAP_TRY(recap__struct_read(request, sizeof copy, &copy, "RECAP_REQUEST_INIT"));
  return recap__request_check(&copy, vocab, max_seq);
}

recap_status recap__request_check(const recap_request *r, int64_t vocab, int64_t max_seq) {
  if (r->prompt_len == 0 || !r->prompt)
    return REFUSE(
        "request.prompt_len = %zu with request.prompt %s: a request needs at least one "
        "prompt token",
        r->prompt_len, r->prompt ? "given" : "NULL");
  /* The maximum sequence counts every token of the request, the prompt and the new ones, as a
   * model's context length does (transformers' max_length, vLLM's max_model_len). The caches
   * could hold one token more, since the last new token is never fed back, but a "maximum
   * sequence of 128" that yields 129 tokens would belie its name, and the scheduler's output
   * limit and its "length" finish count the same way. Checked before the ids are read: a
   * length past the maximum may not match the array either. */
  if (r->prompt_len > (size_t)max_seq)
    return REFUSE(
        "request.prompt_len = %zu: the prompt is longer than the model's maximum "
        "sequence of %" PRId64 " tokens",
        r->prompt_len, max_seq);
  if (r->prompt_len == (size_t)max_seq)
    return REFUSE(
        "request.prompt_len = %zu: leaves no room for a token in the model's maximum "
        "sequence of %" PRId64 " tokens",
        r->prompt_len, max_seq);
  for (size_t i = 0; i < r->prompt_len; i++)
    if (r->prompt[i] < 0 || r->prompt[i] >= vocab)
      return REFUSE("request.prompt[%zu] = %" PRId32 ": outside the vocabulary [0, %" PRId64 ")", i,
                    r->prompt[i], vocab);
  if (r->max_new_tokens < 1)
    return REFUSE("request.max_new_tokens = %d: must be at least 1", r->max_new_tokens);
  if (r->prompt_len + (size_t)r->max_new_tokens > (size_t)max_seq)
    return REFUSE(
        "request.max_new_tokens = %d: with request.prompt_len = %zu it is past the "
        "model's maximum sequence of %" PRId64 " tokens",
        r->max_new_tokens, r->prompt_len, max_seq);
  RECAP_TRY(check_sampling(r));
  if (r->num_stop_ids < 0 || r->num_stop_ids > RECAP_MAX_STOP_IDS)
    return REFUSE("request.num_stop_ids = %d: from 0 to RECAP_MAX_STOP_IDS (%d)", r->num_stop_ids,
                  RECAP_MAX_STOP_IDS);
  if (r->num_stop_ids > 0 && !r->stop_ids)
    return REFUSE("request.num_stop_ids = %d with request.stop_ids NULL", r->num_stop_ids);
  /* A stop id the model cannot produce would never end the request: a mistake, not a choice. */
  for (int k = 0; k < r->num_stop_ids; k++)
    if (r->stop_ids[k] < 0 || r->stop_ids[k] >= vocab)
      return REFUSE("request.stop_ids[%d] = %" PRId32 ": outside the vocabulary [0, %" PRId64 ")",
                    k, r->stop_ids[k], vocab);
  return RECAP_OK;
}

recap_status recap__request_create(const recap_request *r, uint64_t id, uint64_t seed,
                                   const recap__sched *sched, recap__request **out) {
  recap__request *q = calloc(1, sizeof *q);
  if (!q) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a request");
  q->outputs = malloc(sizeof *q->outputs * (size_t)r->max_new_tokens);
  recap_status st = q->outputs ? RECAP_OK
                               : RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                                            "no memory for %d output tokens", r->max_new_tokens);
  if (st == RECAP_OK)
    st = recap__seq_init(&q->seq, sched, id, r->prompt, (int64_t)r->prompt_len, r->max_new_tokens,
                         r->stop_ids, r->num_stop_ids);
  if (st != RECAP_OK) {
    free(q->outputs);
    free(q);
    return st;
  }
  q->id = id;
  q->seq.sampling = (recap__sampling){
      .seed = seed,
      .temperature = r->temperature,
      /* The header's "0 is taken as 1": the sample op reads either as off. */
      .top_p = r->top_p == 0 ? 1.0f : r->top_p,
      .min_p = r->min_p,
      .top_k = r->top_k,
  };
  q->state = RECAP_REQUEST_WAITING;
  q->submit_ms = recap__now_ms();
  q->on_token = r->on_token;
  q->user = r->user;
  *out = q;
  return RECAP_OK;
}

void recap__request_destroy(recap__request *q) {
  if (!q) return;
  recap__seq_free(&q->seq);
  free(q->outputs);
  free(q);
}

bool recap__request_ended(const recap__request *q) {
  return q->state == RECAP_REQUEST_FINISHED || q->state == RECAP_REQUEST_CANCELLED ||
         q->state == RECAP_REQUEST_FAILED;
}

double recap__now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
