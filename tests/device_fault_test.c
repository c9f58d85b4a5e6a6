/*
 * device_fault_test.c: a kernel that faults on the device, run by a pipeline eagerly and
 * inside a captured graph, is reported as RECAP_STATUS_DEVICE_ERROR (never a hang), names the
 * op under RECAP_LAUNCH_BLOCKING=1 in eager mode, and leaves the process's device poisoned.
 *
 * No fault op is added to the production registry: the fault comes from an existing op fed a
 * value only the device sees. An embedding id outside the table (and a kv_append position
 * past the cache) makes the CUDA kernel execute __trap() (kernels/shape.cu) instead of
 * reading or writing out of bounds; on the host backend the same ops fail, which the host
 * backend turns into its sticky fault, as a CUDA context's.
 *
 * A device fault poisons the CUDA context for the rest of the process, so each case runs in a
 * child process (this binary re-executed with --child BACKEND CASE), bounded by alarm() in the
 * child and a deadline in the parent: a hang kills the child and fails the test. The child
 * checks everything itself and exits 0 only when every expectation held; it prints what it
 * saw either way. The CUDA suite is inactive on a machine without a GPU; the host suite runs
 * everywhere.
 */
#define _POSIX_C_SOURCE 200809L

#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test_util.h"

/* A child that has not finished by then is hung (a fault must surface at the next
 * synchronize, within milliseconds). */
enum { CHILD_ALARM_S = 60, PARENT_DEADLINE_S = 90 };

/* An embedding over a 10-row table, and a KV cache of 4 rows appended at `pos`. */
static const char SPEC[] =
    "name: device-fault\n"
    "dtype: f32\n"
    "seed: 5\n"
    "dims: {V: 10, D: 8, N: 3, S: 4}\n"
    "tensors:\n"
    "  ids:   {shape: [N], dtype: i32, role: input, init: zeros}\n"
    "  table: {shape: [V, D], role: param, init: normal, std: 1.0}\n"
    "  pos:   {role: scalar, value: 0}\n"
    "  cache: {shape: [1, S, 1, D], role: state, init: zeros}\n"
    "  row:   {shape: [1, 1, 1, D], role: input}\n"
    "ops:\n"
    "  - {op: embedding, in: [table, ids], out: rows, name: lookup_tokens}\n"
    "  - {op: kv_append, in: [cache, row, pos], out: cache_after, name: append_row}\n"
    "outputs: [rows, cache_after]\n";

typedef enum { BAD_ID, BAD_POSITION } fault_kind;

typedef struct {
  const char *name;
  recap_run_mode mode;
  fault_kind fault;
  bool launch_blocking; /* RECAP_LAUNCH_BLOCKING=1 in the child's environment */
  const char *op;       /* the spec op the error must name (launch_blocking only) */
} fault_case;

static const fault_case CASES[] = {
    {"eager_bad_id", RECAP_MODE_EAGER, BAD_ID, false, NULL},
    {"eager_bad_id_launch_blocking", RECAP_MODE_EAGER, BAD_ID, true, "lookup_tokens"},
    {"eager_bad_position_launch_blocking", RECAP_MODE_EAGER, BAD_POSITION, true, "append_row"},
    {"graph_bad_id", RECAP_MODE_GRAPH, BAD_ID, false, NULL},
    {"graph_bad_position", RECAP_MODE_GRAPH, BAD_POSITION, false, NULL},
};
enum { NUM_CASES = sizeof CASES / sizeof CASES[0] };

/* ---- the child ---- */

static int child_failed;

#define EXPECT(cond, ...)                                          \
  do {                                                             \
    if (!(cond)) {                                                 \
      fprintf(stderr, "child: expectation failed: ");              \
      fprintf(stderr, __VA_ARGS__);                                \
      fprintf(stderr, "\n  last error: %s\n", recap_last_error()); \
      child_failed = 1;                                            \
    }                                                              \
  } while (0)

static recap_status copy_inputs(recap_pipeline *p, int32_t id, int32_t pos) {
  int32_t ids[3] = {1, id, 2};
  float row[8];
  for (int i = 0; i < 8; ++i) row[i] = (float)i;
  recap_status st = recap_pipeline_copy_in(p, "ids", ids, sizeof ids, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "row", row, sizeof row, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_in(p, "pos", &pos, sizeof pos, 0);
  return st;
}

static int run_child(const char *backend, const char *case_name) {
  alarm((unsigned)test_scaled_seconds(CHILD_ALARM_S));
  const fault_case *c = NULL;
  for (int i = 0; i < NUM_CASES; ++i)
    if (strcmp(CASES[i].name, case_name) == 0) c = &CASES[i];
  if (!c) return 2;
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device =
      (recap_device){strcmp(backend, "cuda") == 0 ? RECAP_BACKEND_CUDA : RECAP_BACKEND_HOST, 0};
  o.override_mode = 1;
  o.mode = c->mode;
  recap_pipeline *p = NULL;
  recap_status st = recap_pipeline_create_string(SPEC, strlen(SPEC), "device_fault.yaml", &o, &p);
  if (st != RECAP_OK) {
    fprintf(stderr, "child: creating the pipeline failed: %s: %s\n", recap_status_name(st),
            recap_last_error());
    return 2;
  }
  /* One good run first: in graph mode it captures, so the fault happens in a replay. */
  st = copy_inputs(p, 9, 0);
  if (st == RECAP_OK) st = recap_pipeline_run(p, 0);
  EXPECT(st == RECAP_OK, "a run with valid values returned %s", recap_status_name(st));
  recap_pipeline_stats before = {0};
  EXPECT(recap_pipeline_stats_get(p, &before) == RECAP_OK, "reading the stats failed");
  if (c->mode == RECAP_MODE_GRAPH)
    EXPECT(before.replays == 1 && before.captures == 1,
           "graph mode did not capture and replay once (%llu captures, %llu replays)",
           (unsigned long long)before.captures, (unsigned long long)before.replays);

  st = c->fault == BAD_ID ? copy_inputs(p, 10, 0) : copy_inputs(p, 9, 4);
  EXPECT(st == RECAP_OK, "copying the bad value in returned %s", recap_status_name(st));
  st = recap_pipeline_run(p, 0);
  char message[2048];
  snprintf(message, sizeof message, "%s", recap_last_error());
  printf("child %s/%s: faulting run -> %s: %s\n", backend, c->name, recap_status_name(st), message);
  EXPECT(st == RECAP_STATUS_DEVICE_ERROR, "the faulting run returned %s, not DEVICE_ERROR",
         recap_status_name(st));
  if (c->op) {
    char needle[128];
    snprintf(needle, sizeof needle, "op '%s'", c->op);
    EXPECT(strstr(message, needle) != NULL, "under RECAP_LAUNCH_BLOCKING=1 the error lacks %s",
           needle);
  }
  if (c->mode == RECAP_MODE_GRAPH) {
    recap_pipeline_stats after = {0};
    recap_status sst = recap_pipeline_stats_get(p, &after);
    /* No eager run and no re-capture: the fault came from replaying the captured graph
     * (the CUDA backend counts the replay, submitted before the fault surfaced; the host
     * backend reports the fault from the replay call itself). */
    EXPECT(sst == RECAP_OK && after.eager_runs == before.eager_runs &&
               after.captures == before.captures && after.replays <= before.replays + 1,
           "the faulting run was not a replay of the captured graph (stats %s; replays %llu -> "
           "%llu, eager runs %llu -> %llu)",
           recap_status_name(sst), (unsigned long long)before.replays,
           (unsigned long long)after.replays, (unsigned long long)before.eager_runs,
           (unsigned long long)after.eager_runs);
  }

  /* The context is poisoned: a correct run, a copy and a fresh pipeline all fail now. */
  st = copy_inputs(p, 1, 0);
  if (st == RECAP_OK) st = recap_pipeline_run(p, 0);
  EXPECT(st == RECAP_STATUS_DEVICE_ERROR, "a valid run after the fault returned %s",
         recap_status_name(st));
  recap_pipeline *q = NULL;
  st = recap_pipeline_create_string(SPEC, strlen(SPEC), "device_fault.yaml", &o, &q);
  EXPECT(st == RECAP_STATUS_DEVICE_ERROR, "a new pipeline after the fault returned %s",
         recap_status_name(st));
  recap_pipeline_destroy(q);
  /* Destroying waits for the stream: it must return, not hang, and a failed wait is reported
   * with its cause, not with an empty message. */
  st = recap_pipeline_destroy(p);
  printf("child %s/%s: destroy after the fault -> %s\n", backend, c->name, recap_status_name(st));
  EXPECT(st == RECAP_OK || strstr(recap_last_error(),
                                  "the pipeline is destroyed and its memory "
                                  "released, but waiting for its work failed: "),
         "destroy after the fault returned %s with the message '%s'", recap_status_name(st),
         recap_last_error());
  fflush(NULL);
  return child_failed;
}

/* ---- the parent ---- */

static const char *g_backend = "host";

static int use_host(void) {
  g_backend = "host";
  return 0;
}

static int use_cuda(void) {
  g_backend = "cuda";
  return 0;
}

/* Runs one case in a child; returns true when the child exited 0 in time. */
static bool run_case(const fault_case *c) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    if (c->launch_blocking)
      setenv("RECAP_LAUNCH_BLOCKING", "1", 1);
    else
      unsetenv("RECAP_LAUNCH_BLOCKING");
    char *argv[] = {"device_fault_test", "--child", (char *)g_backend, (char *)c->name, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int wstatus = 0;
  struct timespec tick = {0, 20 * 1000 * 1000};
  pid_t got = 0;
  for (int waited = 0; (got = waitpid(pid, &wstatus, WNOHANG)) == 0; ++waited) {
    if (waited * 0.02 >= test_scaled_seconds(PARENT_DEADLINE_S)) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      fprintf(stderr, "\n  %s/%s: child hung; killed after %.0f s\n", g_backend, c->name,
              test_scaled_seconds(PARENT_DEADLINE_S));
      return false;
    }
    nanosleep(&tick, NULL);
  }
  if (got != pid) return false;
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) return true;
  fprintf(stderr, "\n  %s/%s: child %s %d%s\n", g_backend, c->name,
          WIFEXITED(wstatus) ? "exited with" : "killed by signal",
          WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus),
          WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGALRM ? " (hung: alarm)" : "");
  return false;
}

#define CASE_TEST(index, fn)                 \
  static void fn(void) {                     \
    CU_ASSERT_TRUE(run_case(&CASES[index])); \
  }

CASE_TEST(0, test_eager_out_of_range_id_is_a_device_error_and_poisons_the_device)
CASE_TEST(1, test_eager_fault_under_launch_blocking_names_the_embedding_op)
CASE_TEST(2, test_eager_fault_under_launch_blocking_names_the_kv_append_op)
CASE_TEST(3, test_fault_in_a_graph_replay_is_a_device_error_and_poisons_the_device)
CASE_TEST(4, test_kv_append_past_the_cache_in_a_graph_replay_is_a_device_error)

static void add_cases(CU_pSuite s) {
  CU_ADD_TEST(s, test_eager_out_of_range_id_is_a_device_error_and_poisons_the_device);
  CU_ADD_TEST(s, test_eager_fault_under_launch_blocking_names_the_embedding_op);
  CU_ADD_TEST(s, test_eager_fault_under_launch_blocking_names_the_kv_append_op);
  CU_ADD_TEST(s, test_fault_in_a_graph_replay_is_a_device_error_and_poisons_the_device);
  CU_ADD_TEST(s, test_kv_append_past_the_cache_in_a_graph_replay_is_a_device_error);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--child") == 0) return run_child(argv[2], argv[3]);
  add_cases(test_add_suite("device_fault/host", use_host, NULL));
  add_cases(test_add_cuda_suite("device_fault/cuda", use_cuda, NULL));
  return test_run_all();
}
