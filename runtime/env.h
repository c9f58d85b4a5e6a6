/*
 * env.h: the boolean switches recap reads from the environment (internal).
 *
 * Every on/off RECAP_* variable (RECAP_FUSION, RECAP_DISABLE_GRAPHS, RECAP_GEMM_SKINNY, ...)
 * is read through this one parser, so that they all accept the same spellings:
 *
 *   if (recap__env_bool("RECAP_FUSION", 1)) ... fuse ...
 *
 * Accepted, in any letter case: 1, true, yes, on and 0, false, no, off. An unset or empty
 * variable gives the caller's default. Any other value also gives the default, and the first
 * time a variable holds one a warning on stderr names the variable and its value (once per
 * variable and process: a switch read at every launch does not flood the terminal).
 */
#ifndef RECAP_RUNTIME_ENV_H
#define RECAP_RUNTIME_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 or 0 as described above, else `fallback` (which may be any int, e.g. -1 for "not set"
 * where the caller decides by itself). Thread-safe; never fails. */
int recap__env_bool(const char *name, int fallback);

#ifdef __cplusplus
}
#endif

#endif
