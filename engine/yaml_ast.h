/*
 * yaml_ast.h: YAML text -> a small positioned tree (internal to the engine's spec loader).
 *
 * libyaml's event parser feeds a builder that enforces the limits while it reads, so hostile
 * input (a huge file, deep nesting, an alias bomb, a giant scalar, millions of nodes) fails
 * fast with a positioned error instead of exhausting memory or time:
 *
 *   recap__yaml_ast *ast;
 *   st = recap__yaml_parse(text, len, "mlp.yaml", &limits, &ast, &diag);
 *   if (st == RECAP_OK) ... walk ast->root (NULL for an empty document) ...
 *   recap__yaml_ast_destroy(ast);
 *
 * Every node lives in the tree's arena and dies with it. Aliases are not copied: an alias
 * node IS its anchor's node (the tree is a DAG), and the expansion it would cause is counted
 * against the limit. Anchors are registered when their node is complete, so an alias can
 * never refer to an enclosing node and the DAG has no cycles.
 */
#ifndef RECAP_ENGINE_YAML_AST_H
#define RECAP_ENGINE_YAML_AST_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/diag.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits enforced while parsing; a zero field means its default (see specs/README.md). */
typedef struct {
  size_t max_file_bytes;      /* 16 MiB */
  size_t max_depth;           /* 64 nested collections */
  size_t max_aliases;         /* 100 */
  size_t max_alias_expansion; /* 10,000 nodes reachable through aliases, in all */
  size_t max_scalar_bytes;    /* 64 KiB */
  size_t max_nodes;           /* 2,000,000 nodes */
} recap__yaml_limits;

/* Fills every zero field of *limits with its default. */
void recap__yaml_limits_resolve(recap__yaml_limits *limits);

typedef enum {
  RECAP_YAML_SCALAR,
  RECAP_YAML_SEQUENCE,
  RECAP_YAML_MAPPING,
} recap__yaml_kind;

typedef struct recap__yaml_node recap__yaml_node;
struct recap__yaml_node {
  recap__yaml_kind kind;
  recap__src_pos pos;
  /* Scalars: NUL-terminated text (len bytes; may hold NULs from escapes, which callers treat
   * as invalid names) and whether it was plain (unquoted), which decides whether `1` is a
   * number and `null` is null. */
  const char *text;
  size_t len;
  bool plain;
  /* Sequences: items[0..count). Mappings: keys[i] -> items[i]; keys are scalars. */
  recap__yaml_node **items;
  recap__yaml_node **keys;
  size_t count;
};

typedef struct recap__yaml_ast recap__yaml_ast;
struct recap__yaml_ast {
  recap__yaml_node *root; /* NULL: the text holds no document (empty, or comments only) */
  const char *file;       /* the name positions carry (owned by the tree) */
  struct recap__yaml_chunk *chunks;
};

/* Parses one YAML document. On a YAML error or a limit it records a positioned error in
 * `diag` and returns RECAP_STATUS_SPEC_ERROR (parsing stops there: after a syntax error the
 * rest of the text cannot be read reliably). RECAP_STATUS_OUT_OF_MEMORY if an allocation
 * fails. *out is set only on success; the caller destroys it. `text` need not be
 * NUL-terminated. */
recap_status recap__yaml_parse(const char *text, size_t len, const char *file,
                               const recap__yaml_limits *limits, recap__yaml_ast **out,
                               recap__diag *diag);
void recap__yaml_ast_destroy(recap__yaml_ast *ast);
/* `size` bytes (aligned for any type) that live as long as the tree: for nodes and strings made
 * after parsing (the instances of a spec's blocks). NULL when out of memory. */
void *recap__yaml_ast_alloc(recap__yaml_ast *ast, size_t size);

/* Scalar helpers. A plain `~`, `null`, `Null`, `NULL` or empty scalar is null. */
bool recap__yaml_is_null(const recap__yaml_node *node);
/* "a mapping", "a sequence", "null", "a string", "a number"...: for "expected X, got Y". */
const char *recap__yaml_describe(const recap__yaml_node *node);

#ifdef __cplusplus
}
#endif

#endif
