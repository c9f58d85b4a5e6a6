/*
 * spec_internal.h: the spec checker's working state and the helpers its files share
 * (internal to engine/spec*.c).
 *
 *   spec_root.c     the top-level keys (dims and their overrides, run), the whole spec, load
 *   spec_values.c   scalars and mappings: typed reads of YAML values with positioned errors
 *   spec_tensors.c  tensors: roles, shapes, initializers, the files they name
 *   spec_ops.c      ops: attributes, expressions, references, outputs, what is never used
 *   spec_blocks.c   blocks: a block's tensors and ops, instantiated in place of its uses
 */
#ifndef RECAP_ENGINE_SPEC_INTERNAL_H
#define RECAP_ENGINE_SPEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/names.h"
#include "engine/spec.h"

enum {
  DEFAULT_MAX_TENSORS = 100000,
  DEFAULT_MAX_OPS = 100000,
  MAX_STREAMS = 64,
  MAX_NAME_BYTES = 256,
  MAX_WARMUP = 10000,
  MAX_ITERS = 10000000,
};
#define MAX_SIZE RECAP__SPEC_MAX_SIZE

/* Where an op of the spec's (expanded) op list comes from, for the ops of a block's instance. */
typedef struct {
  const recap__yaml_node *written; /* the op as the block's text writes it */
  /* "<use>.<i>.<op>#<k>" (the block's k-th op): the name of an op without `name:`, and how
   * errors call it until its name is known. */
  const char *label;
} recap__spec_op_origin;

/* A dim given as another dim's name, while the spec's, the entry's and the caller's values are
 * applied in turn. */
typedef struct {
  const char *name;   /* the dim it names (NULL: the dim has values of its own) */
  recap__src_pos pos; /* where the spec says it; file NULL for a caller's override */
} recap__spec_dim_alias;

typedef struct recap__spec_loader {
  recap__spec *spec;
  recap__diag *diag;
  bool oom;
  /* The first problem with the caller's dim overrides (options.dims): an invalid argument, not
   * an error in the spec, so it is reported alone and nothing else is checked. */
  char bad_override[320];
  recap__names dims;     /* dim name -> index */
  /* Per dim: its alias until the dims are final (then recap__spec_dim.alias says it). */
  recap__spec_dim_alias *dim_aliases;
  recap__names tensors;  /* tensor name -> index (declared and produced so far) */
  recap__names future;   /* op output name -> op index (all ops) */
  bool checkpoint_given; /* `checkpoint:` is in the spec (it may have failed to open) */
  /* The spec's text, to place errors inside an `expr:` string (NULL: at the string). */
  const char *text;
  size_t text_len;
  /* Per op of the expanded op list: its origin, or written NULL for a top-level op (NULL: the
   * spec uses no block). */
  const recap__spec_op_origin *op_origins;
} loader;

#define ERR(L, pos, ...) recap__diag_error((L)->diag, (pos), __VA_ARGS__)

typedef enum { INT_OK, INT_NOT_INT, INT_OVERFLOW } int_parse;

/* Typed reads of YAML values (spec_values.c): false, with an error at the value, when it is not
 * what `what` needs. */
bool recap__spec_is_scalar(const recap__yaml_node *n);
/* A name: letters, digits and _ . - / :, starting with a letter or _, at most MAX_NAME_BYTES. */
bool recap__spec_is_name(const recap__yaml_node *n);
bool recap__spec_get_name(loader *L, const recap__yaml_node *n, const char *what, const char **out);
bool recap__spec_get_string(loader *L, const recap__yaml_node *n, const char *what,
                            const char **out);
int_parse recap__spec_parse_int(const recap__yaml_node *n, int64_t *out);
bool recap__spec_get_int(loader *L, const recap__yaml_node *n, const char *what, int64_t lo,
                         int64_t hi, int64_t *out);
bool recap__spec_get_float(loader *L, const recap__yaml_node *n, const char *what, double *out);
bool recap__spec_get_bool(loader *L, const recap__yaml_node *n, const char *what, int *out);
bool recap__spec_get_dtype(loader *L, const recap__yaml_node *n, const char *what, bool float_only,
                           recap_dtype *out);
/* A size: a literal integer (>= min) or a dim's name. */
bool recap__spec_get_size(loader *L, const recap__yaml_node *n, const char *what, int64_t min,
                          recap__spec_size *out);
/* Where byte `offset` of scalar v's (decoded) text is in the spec: the scalar's start plus the
 * characters of its source up to there, decoding quotes and escapes on the way, so the column
 * points INTO the string (columns count characters, as libyaml's do). Block scalars and
 * scalars whose source spans lines before the offset (where folding changes the text) are
 * placed at their start. */
recap__src_pos recap__spec_scalar_offset_pos(const loader *L, const recap__yaml_node *v,
                                             size_t offset);
/* Mappings (spec_values.c). */
const recap__yaml_node *recap__spec_lookup(const recap__yaml_node *map, const char *key);
const recap__yaml_node *recap__spec_lookup_key(const recap__yaml_node *map, const char *key);
/* "a, b, c" into buf. */
void recap__spec_join_names(const char *const *names, char *buf, size_t size);
/* Reports keys that are not in `allowed` (NULL-terminated) and keys given twice. */
void recap__spec_check_keys(loader *L, const recap__yaml_node *map, const char *const *allowed,
                            const char *context);
bool recap__spec_expect_kind(loader *L, const recap__yaml_node *n, recap__yaml_kind kind,
                             const char *what);
/* The index of s in the NULL-terminated words, or -1 (spec_tensors.c). */
int recap__spec_find_word(const char *const *words, const char *s);
/* `blocks:` and the ops that use them (spec_blocks.c): *tensors and *ops become the spec's
 * `tensors:` and `ops:` with every block instance's tensors and ops in place (L->op_origins
 * says which op came from where), or stay as given when the spec uses no block. False when
 * the blocks or their uses have errors (reported): the ops cannot be expanded, and the tensors
 * and ops are not checked. */
bool recap__spec_expand_blocks(loader *L, const recap__yaml_node *root,
                               const recap__yaml_node **tensors, const recap__yaml_node **ops);
/* The top-level `checkpoint:`, opened for the tensors to read by key (spec_tensors.c). */
void recap__spec_parse_checkpoint(loader *L, const recap__yaml_node *node);
/* `tensors:` (spec_tensors.c). */
void recap__spec_parse_tensors(loader *L, const recap__yaml_node *node);
/* `ops:`, growing spec->tensors (of *tensor_capacity) by each op's outputs (spec_ops.c). */
void recap__spec_parse_ops(loader *L, const recap__yaml_node *node, size_t *tensor_capacity);
/* `outputs:` (spec_ops.c). */
void recap__spec_parse_outputs(loader *L, const recap__yaml_node *node);
/* Tensors declared or computed but never used; without `outputs:`, the unread results become
 * the outputs (spec_ops.c). */
void recap__spec_check_usage(loader *L);

#endif
