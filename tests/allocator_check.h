/*
 * allocator_check.h: checks the allocator tests share: the JSON snapshot, parsed, and the
 * invariant that every segment is tiled by its blocks and every stat equals the sum over the
 * snapshot (and the live stats).
 */
#ifndef RECAP_TESTS_ALLOCATOR_CHECK_H
#define RECAP_TESTS_ALLOCATOR_CHECK_H

#include <jansson.h>
#include <stdint.h>

#include "allocator/allocator.h"

/* The allocator's snapshot as parsed JSON (fails the test if it is not JSON). */
json_t *allocator_snapshot(recap__allocator *a);
/* An integer member of a JSON object (fails the test if absent or not an integer). */
int64_t json_int(json_t *obj, const char *key);
void allocator_check_consistent(recap__allocator *a);

#endif
