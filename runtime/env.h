/*
 * env.h: the environment variables recap reads (internal): their table and the one parser of
 * boolean switches.
 *
 * runtime/env_table.c lists every RECAP_* variable the library, the CLI and the tests read,
 * with its values, default and meaning. It is the one source of `recap --help`'s environment
 * section, of `recap env` and of docs/ENVIRONMENT.md (`recap env --markdown`, checked by
 * tests/docs_test.sh), and scripts/check_env.py (CI) fails when code reads a RECAP_* name the
 * table lacks, or the table lists one no code reads:
 *
 *   size_t n;
 *   const recap__env_var *vars = recap__env_vars(&n);
 *   for (size_t i = 0; i < n; i++) if (!vars[i].test_only) puts(vars[i].name);
 *
 * Every on/off RECAP_* variable (RECAP_FUSION, RECAP_DISABLE_GRAPHS, RECAP_GEMM_SKINNY, ...)
 * is read through this one parser, so that they all accept the same spellings:
 *
 *   if (recap__env_bool("RECAP_FUSION", 1)) ... fuse ...
 *
 * Accepted, in any letter case: 1, true, yes, on and 0, false, no, off. An unset or empty
 * variable gives the caller's default. Any other value also gives the default, and the first
 * time a variable holds one a warning on stderr names the variable and its value (once per
 * variable and process: a switch read at every launch does not flood the terminal). A warning
 * rather than an error because switches are read deep inside loads and launches, which should
 * not fail over a debugging switch's typo; the warning says which value was ignored.
 */
#ifndef RECAP_RUNTIME_ENV_H
#define RECAP_RUNTIME_ENV_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RECAP__ENV_BOOL,   /* a switch read by recap__env_bool */
  RECAP__ENV_INT,    /* a decimal integer */
  RECAP__ENV_CHOICE, /* one of the words `values` lists */
  RECAP__ENV_PATH,   /* a file or folder */
  RECAP__ENV_TEXT,   /* a small language of its own (RECAP_ALLOC_CONF's key:value list) */
} recap__env_kind;

typedef struct {
  const char *name; /* "RECAP_FUSION" */
  recap__env_kind kind;
  const char *values;   /* the accepted values as the docs show them: "1/0", "warn, error, off" */
  const char *fallback; /* what applies when it is unset: "1", "physical memory", "auto" */
  const char *summary;  /* one line (`recap --help`) */
  const char *details;  /* more for the docs page, or NULL */
  bool test_only;       /* read by tests and test scripts only, never by the library or CLI */
} recap__env_var;

/* Every variable, sorted by name; *count gets how many. Static storage; never fails. */
const recap__env_var *recap__env_vars(size_t *count);
/* The entry named `name`, or NULL. */
const recap__env_var *recap__env_find(const char *name);
/* "bool", "integer", "choice", "path" or "text". */
const char *recap__env_kind_name(recap__env_kind kind);

/* 1 or 0 as described above, else `fallback` (which may be any int, e.g. -1 for "not set"
 * where the caller decides by itself). Thread-safe; never fails. */
int recap__env_bool(const char *name, int fallback);
/* What recap__env_bool makes of `value`: 1 or 0, or -1 when it is no switch spelling (for
 * `recap env`, which marks such values without warning). */
int recap__env_bool_value(const char *value);

#ifdef __cplusplus
}
#endif

#endif
