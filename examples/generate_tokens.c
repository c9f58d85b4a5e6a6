/*
 * generate_tokens: greedy generation through recap's generator (recap_generator_*), using
 * nothing but recap.h and librecap.so.
 *
 *   recap import-hf MODEL_DIR -o serve.yaml --paged     # a Hugging Face checkpoint as a spec
 *   generate_tokens serve.yaml 16 1 17 42 99             # 16 new tokens after prompt 1 17 42 99
 *
 * It prints the new token ids on one line. The generator runs requests on its own engine thread;
 * this program submits one and waits for it, where a server would submit many from any thread.
 * Runs on the GPU when this recap has one, else on the host backend.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "recap.h"

enum { MAX_PROMPT = 4096 };

static int fail(const char *what, recap_status st) {
  fprintf(stderr, "generate_tokens: %s: %s (%s)\n", what, recap_status_name(st),
          recap_last_error());
  return 1;
}

/* A decimal integer in [min, max], the whole argument. */
static int parse_int(const char *text, long min, long max, long *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) return 0;
  *out = v;
  return 1;
}

int main(int argc, char **argv) {
  if (argc < 4 || argc - 3 > MAX_PROMPT) {
    fprintf(stderr, "usage: generate_tokens SPEC MAX_NEW_TOKENS PROMPT_ID...\n");
    return 2;
  }
  long max_new = 0;
  if (!parse_int(argv[2], 1, 1 << 20, &max_new)) {
    fprintf(stderr, "generate_tokens: MAX_NEW_TOKENS '%s' is not a positive integer\n", argv[2]);
    return 2;
  }
  static int32_t prompt[MAX_PROMPT];
  size_t prompt_len = (size_t)(argc - 3);
  for (size_t i = 0; i < prompt_len; i++) {
    long id = 0;
    if (!parse_int(argv[3 + i], 0, INT32_MAX, &id)) {
      fprintf(stderr, "generate_tokens: prompt id '%s' is not a token id\n", argv[3 + i]);
      return 2;
    }
    prompt[i] = (int32_t)id;
  }

  /* An imported spec names the cuda device; the host backend runs it where there is no GPU. */
  recap_generator_options options = RECAP_GENERATOR_OPTIONS_INIT;
  options.override_device = 1;
  options.device.backend = recap_device_is_available(RECAP_BACKEND_CUDA) ? RECAP_BACKEND_CUDA
                                                                          : RECAP_BACKEND_HOST;
  options.quiet = 1;
  recap_generator *g = NULL;
  recap_status st = recap_generator_create(argv[1], &options, &g);
  if (st != RECAP_OK) return fail("create", st);

  int32_t *tokens = malloc(sizeof *tokens * (size_t)max_new);
  recap_request request = {
      .struct_size = sizeof request,
      .prompt = prompt,
      .prompt_len = prompt_len,
      .max_new_tokens = (int)max_new,
      .temperature = 0.0f, /* greedy */
  };
  uint64_t id = 0;
  recap_request_status status = {0};
  int failed = 0;
  if (!tokens) {
    fprintf(stderr, "generate_tokens: out of memory\n");
    failed = 1;
  } else if ((st = recap_generator_submit(g, &request, &id, NULL)) != RECAP_OK) {
    failed = fail("submit", st);
  } else if ((st = recap_generator_wait(g, id, -1.0)) != RECAP_OK) {
    failed = fail("wait", st);
  } else if ((st = recap_generator_poll(g, id, tokens, (size_t)max_new, &status)) != RECAP_OK) {
    failed = fail("poll", st);
  } else if (status.state != RECAP_REQUEST_FINISHED) {
    fprintf(stderr, "generate_tokens: the request ended unfinished (state %d, %s)\n",
            (int)status.state, recap_status_name(status.error));
    failed = 1;
  } else {
    for (size_t i = 0; i < status.num_tokens; i++)
      printf("%s%" PRId32, i ? " " : "", tokens[i]);
    printf("\n");
  }
  free(tokens);
  if ((st = recap_generator_destroy(g)) != RECAP_OK) failed = fail("destroy", st);
  return failed;
}
