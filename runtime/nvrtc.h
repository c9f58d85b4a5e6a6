/*
 * nvrtc.h: compiling generated CUDA C++ to a cubin at run time with NVRTC, and a disk cache
 * of the results (internal to recap).
 *
 *   char *cubin; size_t size; bool hit;
 *   RECAP_TRY(recap__nvrtc_compile_cached(source, "recap_expr.cu", 90, &cubin, &size, &hit));
 *   ... load cubin (cudaLibraryLoadData) ...
 *   free(cubin);
 *
 * NVRTC is not linked: libnvrtc is opened with dlopen when a compile needs it, from the file
 * RECAP_NVRTC_LIBRARY names, else libnvrtc.so.13 (then libnvrtc.so) found in LD_LIBRARY_PATH,
 * $CUDA_PATH/lib64, /usr/local/cuda/lib64 or the system's library folders, so recap starts
 * where NVRTC is not installed, and only what needs it fails (RECAP_STATUS_NOT_SUPPORTED
 * naming libnvrtc and where it looked). A failed open is not remembered: a later call tries
 * again. Opening it costs tens of milliseconds, so a cache hit does not: it only finds the
 * file. This is host code: it needs no GPU, so the cache is tested on machines without one.
 *
 * Compiles are for one exact architecture (sm_<arch>, a cubin, no PTX) with fixed options:
 * --gpu-architecture=sm_<arch> --device-as-default-execution-space --fmad=false (no contraction of
 * a * b + c, so the kernels' arithmetic matches the host's f32 operations bit for bit).
 *
 * Cache: one file per compile in RECAP_CACHE_DIR, else $XDG_CACHE_HOME/recap, else
 * ~/.cache/recap (created 0700 when missing; with none of these set, nothing is cached). The
 * key is (source, NVRTC, arch, options), where NVRTC is named by its library file's resolved
 * path, size and modification time (which pins its exact version, and is known without
 * loading it); the file is named by a 128-bit hash of the key and holds the key itself, so a
 * hash collision is a miss, never a wrong kernel. Files are written atomically (temporary file
 * + rename), and a file that is truncated, corrupt or for another key is ignored with a warning
 * on stderr and replaced by a fresh compile. A cache that cannot be written is not an error
 * (the compile result is still returned).
 */
#ifndef RECAP_RUNTIME_NVRTC_H
#define RECAP_RUNTIME_NVRTC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* NVRTC's version; NOT_SUPPORTED (naming libnvrtc and what was tried) when it cannot be
 * loaded. */
recap_status recap__nvrtc_version(int *major, int *minor);

/* The fixed NVRTC options for `arch` (e.g. 90), space-separated, into buf. */
void recap__nvrtc_options(int arch, char *buf, size_t size);

/* Compiles `source` (named `name` in NVRTC's messages) to a cubin for sm_<arch>, without the
 * cache. *cubin is malloc'd (the caller frees it). A compile error returns
 * RECAP_STATUS_LIBRARY_ERROR with NVRTC's log (generated code that does not compile is
 * recap's bug); NOT_SUPPORTED without NVRTC (or for an arch it does not know);
 * OUT_OF_MEMORY. */
recap_status recap__nvrtc_compile(const char *source, const char *name, int arch, char **cubin,
                                  size_t *size);

/* As recap__nvrtc_compile, through the disk cache; *hit (may be NULL) says whether the cubin
 * came from it. A hit needs libnvrtc's file to exist (it is part of the key), not loaded. */
recap_status recap__nvrtc_compile_cached(const char *source, const char *name, int arch,
                                         char **cubin, size_t *size, bool *hit);

/* Counters since the process started (all threads). */
typedef struct {
  uint64_t hits;        /* cubins read from the cache */
  uint64_t compiles;    /* NVRTC compiles (misses, corrupt files, no cache) */
  uint64_t corrupt;     /* cache files ignored as truncated, corrupt or for another key */
  uint64_t write_fails; /* results that could not be stored */
  uint64_t loads;       /* times libnvrtc was opened (0 or 1: a hit never opens it) */
} recap__nvrtc_stats;

void recap__nvrtc_stats_get(recap__nvrtc_stats *out);

/* The cache folder in effect (see above) into buf; false when there is none. */
bool recap__nvrtc_cache_dir(char *buf, size_t size);

/* The cache file path for a source compiled for arch (for tests and diagnostics); false
 * without a cache folder or libnvrtc. */
bool recap__nvrtc_cache_path(const char *source, int arch, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif
