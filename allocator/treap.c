/* treap.c: the intrusive treap behind the allocator's block indexes (see treap.h). */
#include "allocator/treap.h"

#include <stddef.h>

/* Priorities come from the node's address through a mixing function: nodes live at distinct
 * addresses, so this is as good as a random draw and needs no generator state (and no lock). */
static uint32_t priority_of(const recap__tnode *node) {
  uint64_t x = (uint64_t)(uintptr_t)node;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Splits t into nodes < key (*left) and nodes >= key (*right). */
static void split(recap__tnode *t, const recap__tnode *key, recap__tcmp cmp, recap__tnode **left,
                  recap__tnode **right) {
  if (!t) {
    *left = *right = NULL;
  } else if (cmp(t, key) < 0) {
    split(t->right, key, cmp, &t->right, right);
    *left = t;
  } else {
    split(t->left, key, cmp, left, &t->left);
    *right = t;
  }
}

/* Joins two treaps where every node of a orders before every node of b. */
static recap__tnode *merge(recap__tnode *a, recap__tnode *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->priority > b->priority) {
    a->right = merge(a->right, b);
    return a;
  }
  b->left = merge(a, b->left);
  return b;
}

void recap__treap_insert(recap__tnode **root, recap__tnode *node, recap__tcmp cmp) {
  node->left = node->right = NULL;
  node->priority = priority_of(node);
  /* Descend while the existing nodes outrank the new one, then split the rest around it. */
  recap__tnode **link = root;
  while (*link && (*link)->priority > node->priority)
    link = cmp(node, *link) < 0 ? &(*link)->left : &(*link)->right;
  split(*link, node, cmp, &node->left, &node->right);
  *link = node;
}

void recap__treap_remove(recap__tnode **root, recap__tnode *node, recap__tcmp cmp) {
  recap__tnode **link = root;
  while (*link && *link != node) link = cmp(node, *link) < 0 ? &(*link)->left : &(*link)->right;
  if (*link) *link = merge(node->left, node->right);
  node->left = node->right = NULL;
}

recap__tnode *recap__treap_lower_bound(recap__tnode *root, const recap__tnode *key,
                                       recap__tcmp cmp) {
  recap__tnode *best = NULL;
  while (root) {
    if (cmp(root, key) >= 0) {
      best = root;
      root = root->left;
    } else {
      root = root->right;
    }
  }
  return best;
}

recap__tnode *recap__treap_floor(recap__tnode *root, const recap__tnode *key, recap__tcmp cmp) {
  recap__tnode *best = NULL;
  while (root) {
    if (cmp(root, key) <= 0) {
      best = root;
      root = root->right;
    } else {
      root = root->left;
    }
  }
  return best;
}

void recap__treap_walk(recap__tnode *root, void (*fn)(recap__tnode *node, void *user), void *user) {
  while (root) {
    recap__treap_walk(root->left, fn, user);
    fn(root, user);
    root = root->right;
  }
}
