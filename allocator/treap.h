/*
 * treap.h: an intrusive ordered set (a treap), the allocator's index of blocks (internal).
 *
 * The allocator keeps free blocks ordered by (stream, size, address) for best fit, and its
 * segments (their first blocks) ordered by address so that a pointer into the middle of a
 * block finds its segment (exact pointers go through block_map.h instead). Both need
 * "smallest element >= key" and "largest element <= key" in O(log n), which a hash map cannot
 * give and a sorted array gives only with O(n) inserts. A treap is the smallest balanced tree
 * that does: expected O(log n) per operation with no rebalancing cases.
 *
 * Nodes are embedded in the caller's structs (a block carries one node per set it belongs to);
 * the set never allocates, so no operation can fail. Keys must be unique under `cmp`.
 *
 *   recap__tnode *root = NULL;
 *   recap__treap_insert(&root, &b->by_base, cmp_base);
 *   recap__tnode *n = recap__treap_floor(root, &key.by_base, cmp_base);
 */
#ifndef RECAP_ALLOCATOR_TREAP_H
#define RECAP_ALLOCATOR_TREAP_H

#include <stdint.h>

typedef struct recap__tnode {
  struct recap__tnode *left, *right;
  uint32_t priority;
} recap__tnode;

/* Negative, zero or positive as a orders before, equal to or after b. */
typedef int (*recap__tcmp)(const recap__tnode *a, const recap__tnode *b);

/* Inserts `node` (not already in any set through this member). */
void recap__treap_insert(recap__tnode **root, recap__tnode *node, recap__tcmp cmp);
/* Removes `node`, which must be in the set. */
void recap__treap_remove(recap__tnode **root, recap__tnode *node, recap__tcmp cmp);
/* The smallest node >= key, or NULL. */
recap__tnode *recap__treap_lower_bound(recap__tnode *root, const recap__tnode *key,
                                       recap__tcmp cmp);
/* The largest node <= key, or NULL. */
recap__tnode *recap__treap_floor(recap__tnode *root, const recap__tnode *key, recap__tcmp cmp);
/* Calls fn on every node in order; fn may not modify the set. */
void recap__treap_walk(recap__tnode *root, void (*fn)(recap__tnode *node, void *user), void *user);

#endif
