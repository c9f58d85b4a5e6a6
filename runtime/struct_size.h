/*
 * struct_size.h: reading a caller's struct that begins with `size_t struct_size` (internal;
 * recap.h's conventions say what callers do). The caller's struct may be older (smaller) or
 * newer (larger) than the one this library was compiled with.
 *
 *   recap_pipeline_options o;
 *   RECAP_TRY(recap__struct_read(options, sizeof o, &o, "RECAP_PIPELINE_OPTIONS_INIT"));
 *   // o is this library's layout: the caller's fields, zeros (the defaults) after them
 */
#ifndef RECAP_RUNTIME_STRUCT_SIZE_H
#define RECAP_RUNTIME_STRUCT_SIZE_H

#include <stddef.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies the caller's struct at `src` into `dst` (`size` bytes, this library's layout) reading
 * only the first src->struct_size bytes of src: fields past them are zeroed (their defaults);
 * dst's struct_size becomes `size`. A struct_size smaller than the field itself (0: a struct
 * zeroed without its initializer, named by `init`) or implausibly large (garbage) is
 * RECAP_STATUS_INVALID_ARGUMENT; bytes past `size` (fields of a newer recap.h) must be zero,
 * else RECAP_STATUS_NOT_SUPPORTED. dst is untouched on failure. */
recap_status recap__struct_read(const void *src, size_t size, void *dst, const char *init);

#ifdef __cplusplus
}
#endif

#endif
