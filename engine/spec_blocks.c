/*
 * spec_blocks.c: `blocks:`, tensors and ops written once and instantiated in place of the ops
 * that use them (spec_internal.h).
 *
 *   blocks:
 *     layer: {input: x, output: y, tensors: {...}, ops: [...]}
 *   ops:
 *     - {block: layer, count: 4, in: h0, out: h, name: layers}
 *
 * The expansion works on the YAML tree, before anything else is checked: each instance is a
 * copy of the block's `tensors:` and `ops:` text in which the block-local names are made unique
 * ("layers.3.wq"), the input and output are wired to the neighbouring instances, and `{i}` in
 * strings is the instance's index. The rest of the loader then reads the expanded spec as if
 * it had been written flat, so a block's tensors and ops follow every rule that top-level ones
 * do, with no second implementation of any of them. Every copied node keeps its place in the
 * block's text and says which instance it belongs to (recap__src_pos.instance), so an error
 * about it, from the spec check or from a bucket's IR, names both.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/spec_internal.h"
#include "kernels/op.h"

enum {
  /* Instances of one use: a model has tens of layers; thousands are a mistake or an attack. */
  MAX_BLOCK_COUNT = 4096,
  /* Inputs of a block (and as many outputs): the streams one layer hands the next. */
  MAX_BLOCK_PORTS = 8,
};

typedef struct {
  const char *name;
  const recap__yaml_node *tensors; /* mapping, or NULL */
  const recap__yaml_node *ops;     /* sequence */
  const recap__yaml_node *inputs[MAX_BLOCK_PORTS], *outputs[MAX_BLOCK_PORTS];
  int num_ports;
  recap__names locals;       /* names the block declares or its ops produce */
  recap__names input_names;  /* -> input index */
  recap__names output_names; /* -> output index */
  /* What one instance adds to the spec. */
  size_t num_tensors, num_ops, num_op_outputs, num_nodes;
  bool ok, used;
} block;

typedef struct {
  const recap__yaml_node *node;  /* the entry of ops: */
  const recap__yaml_node *count; /* its count: value (the bounds' errors point at it) */
  block *block;                  /* NULL: the entry is an op */
  const char *name;              /* instance i's names start "<name>.<i>." */
  size_t instances;
  const recap__yaml_node *in[MAX_BLOCK_PORTS], *out[MAX_BLOCK_PORTS];
} use;

typedef struct {
  const use *use;
  size_t index;
  const char *prefix; /* "layers.3" */
  const char *label;  /* "layers.3 (block 'layer', i = 3)": errors inside it say this */
} instance;

typedef struct {
  loader *L;
  block *blocks;
  size_t num_blocks;
  recap__names block_names; /* -> index into blocks */
  bool failed;              /* a bad index template (reported): the expansion fails */
} expander;

static const char *const block_keys[] = {"input", "output", "tensors", "ops", NULL};
static const char *const use_keys[] = {"block", "count", "in", "out", "name", NULL};

/* ---- strings and nodes in the spec's tree (they live as long as the spec) ----------------- */

static void *tree_alloc(expander *E, size_t size) {
  void *p = recap__yaml_ast_alloc(E->L->spec->ast, size);
  if (!p) E->L->oom = true;
  return p;
}

static char *tree_format(expander *E, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *tree_format(expander *E, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *s = n < 0 ? NULL : tree_alloc(E, (size_t)n + 1);
  if (!s) return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

/* Nodes one copy of n makes (aliases counted at every place they appear, as a copy repeats
 * them; the parser bounds how many nodes aliases reach). */
static size_t count_nodes(const recap__yaml_node *n) {
  if (!n) return 0;
  size_t total = 1;
  if (n->kind == RECAP_YAML_SCALAR) return total;
  for (size_t i = 0; i < n->count; ++i) total += count_nodes(n->items[i]) + (n->keys ? 1 : 0);
  return total;
}

/* Tensors an entry of ops: names as its outputs. */
static size_t count_op_outputs(const recap__yaml_node *op) {
  const recap__yaml_node *out =
      op->kind == RECAP_YAML_MAPPING ? recap__spec_lookup(op, "out") : NULL;
  return !out ? 0 : out->kind == RECAP_YAML_SEQUENCE ? out->count : 1;
}

/* A name or a list of 1 to MAX_BLOCK_PORTS names into out[]; their count, or -1 (reported). */
static int get_ports(expander *E, const recap__yaml_node *v, const char *what,
                     const recap__yaml_node **out) {
  loader *L = E->L;
  bool list = v->kind == RECAP_YAML_SEQUENCE;
  size_t count = list ? v->count : 1;
  if (v->kind == RECAP_YAML_MAPPING) {
    ERR(L, v->pos, "%s: expected a tensor name or a list of them, got a mapping", what);
    return -1;
  }
  if (count == 0 || count > MAX_BLOCK_PORTS) {
    ERR(L, v->pos, "%s: a list of %zu names, expected 1 to %d", what, count, MAX_BLOCK_PORTS);
    return -1;
  }
  bool ok = true;
  for (size_t i = 0; i < count; ++i) {
    const char *name;
    out[i] = list ? v->items[i] : v;
    if (!recap__spec_get_name(L, out[i], what, &name)) ok = false;
    for (size_t j = 0; ok && j < i; ++j)
      if (!strcmp(out[j]->text, name)) {
        ERR(L, out[i]->pos, "%s: '%s' is listed twice", what, name);
        ok = false;
      }
  }
  return ok ? (int)count : -1;
}

/* ---- block definitions ------------------------------------------------------------------ */

static bool put_name(expander *E, recap__names *names, const char *name, int value) {
  int previous;
  if (!recap__names_put(names, name, value, &previous)) E->L->oom = true;
  return !E->L->oom;
}

/* The names an op of the block's text defines (its out:), which are local to an instance. */
static void collect_op(expander *E, block *b, size_t k, recap__names *produced) {
  loader *L = E->L;
  const recap__yaml_node *op = b->ops->items[k];
  if (op->kind != RECAP_YAML_MAPPING) return; /* the op check reports it, in instance 0 */
  char what[MAX_NAME_BYTES + 64];
  snprintf(what, sizeof what, "block '%s': op #%zu", b->name, k);
  const recap__yaml_node *nested = recap__spec_lookup_key(op, "block"), *name, *out;
  if (nested)
    ERR(L, nested->pos,
        "%s uses a block; blocks do not nest (use both blocks in the top-level ops:)", what);
  const char *text;
  if ((name = recap__spec_lookup(op, "name"))) recap__spec_get_name(L, name, "op name", &text);
  if (!(out = recap__spec_lookup(op, "out"))) return; /* reported by the op check */
  size_t count = out->kind == RECAP_YAML_SEQUENCE ? out->count : 1;
  for (size_t i = 0; i < count; ++i) {
    const recap__yaml_node *e = out->kind == RECAP_YAML_SEQUENCE ? out->items[i] : out;
    if (!recap__spec_get_name(L, e, "out", &text)) continue;
    if (recap__names_get(&b->input_names, text) >= 0)
      ERR(L, e->pos,
          "%s writes '%s', the block's input (an instance reads its input from the one "
          "before it; give the result another name)",
          what, text);
    if (!put_name(E, &b->locals, text, 0) || !put_name(E, produced, text, 0)) return;
  }
}

static void parse_block(expander *E, const recap__yaml_node *key, const recap__yaml_node *v,
                        block *b) {
  loader *L = E->L;
  size_t errors = recap__diag_errors(L->diag);
  char what[MAX_NAME_BYTES + 32];
  snprintf(what, sizeof what, "block '%s'", b->name);
  if (!recap__spec_expect_kind(L, v, RECAP_YAML_MAPPING, what)) return;
  recap__spec_check_keys(L, v, block_keys, what);
  const recap__yaml_node *input = recap__spec_lookup(v, "input"),
                         *output = recap__spec_lookup(v, "output");
  b->tensors = recap__spec_lookup(v, "tensors");
  b->ops = recap__spec_lookup(v, "ops");
  int inputs = -1, outputs = -1;
  char port_what[MAX_NAME_BYTES + 48];
  if (!input)
    ERR(L, key->pos, "%s needs `input:`, the name its ops read the previous instance's output by",
        what);
  snprintf(port_what, sizeof port_what, "%s: input", what);
  if (input) inputs = get_ports(E, input, port_what, b->inputs);
  if (!output)
    ERR(L, key->pos, "%s needs `output:`, the name of the tensor an instance hands the next", what);
  snprintf(port_what, sizeof port_what, "%s: output", what);
  if (output) outputs = get_ports(E, output, port_what, b->outputs);
  if (inputs > 0 && outputs > 0 && inputs != outputs)
    ERR(L, output->pos,
        "%s has %d input%s and %d output%s; instance i's outputs feed instance i + 1's "
        "inputs, one for one",
        what, inputs, inputs == 1 ? "" : "s", outputs, outputs == 1 ? "" : "s");
  b->num_ports = inputs > 0 ? inputs : 0;
  for (int p = 0; p < b->num_ports; ++p)
    if (!put_name(E, &b->input_names, b->inputs[p]->text, p)) return;

  if (b->tensors && recap__spec_expect_kind(L, b->tensors, RECAP_YAML_MAPPING, "tensors")) {
    b->num_tensors = b->tensors->count;
    for (size_t i = 0; i < b->tensors->count; ++i) {
      const recap__yaml_node *k = b->tensors->keys[i];
      const char *name;
      if (!recap__spec_get_name(L, k, "tensor name", &name)) continue;
      if (recap__names_get(&b->input_names, name) >= 0)
        ERR(L, k->pos,
            "%s declares tensor '%s', the name of its input (an instance reads its input "
            "from the one before it)",
            what, name);
      if (!put_name(E, &b->locals, name, 0)) return;
    }
  }
  recap__names produced = {0};
  if (!b->ops) {
    ERR(L, key->pos, "%s needs `ops:`, the list of its ops", what);
  } else if (recap__spec_expect_kind(L, b->ops, RECAP_YAML_SEQUENCE, "ops")) {
    if (b->ops->count == 0) ERR(L, b->ops->pos, "%s: ops: the list is empty", what);
    b->num_ops = b->ops->count;
    for (size_t k = 0; k < b->ops->count && !L->oom; ++k) {
      collect_op(E, b, k, &produced);
      b->num_op_outputs += count_op_outputs(b->ops->items[k]);
    }
    for (int p = 0; p < outputs && !L->oom; ++p)
      if (recap__names_get(&produced, b->outputs[p]->text) < 0)
        ERR(L, b->outputs[p]->pos, "%s: output '%s' is not produced by any of its ops", what,
            b->outputs[p]->text);
  }
  recap__names_free(&produced);
  for (int p = 0; p < outputs && !L->oom; ++p)
    put_name(E, &b->output_names, b->outputs[p]->text, p);
  b->num_nodes = count_nodes(b->tensors) + count_nodes(b->ops);
  b->ok = recap__diag_errors(L->diag) == errors && !L->oom;
}

static void parse_blocks(expander *E, const recap__yaml_node *node) {
  loader *L = E->L;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_MAPPING, "blocks")) return;
  recap__spec_check_keys(L, node, NULL, "blocks");
  E->blocks = calloc(node->count ? node->count : 1, sizeof *E->blocks);
  if (!E->blocks) {
    L->oom = true;
    return;
  }
  for (size_t i = 0; i < node->count && !L->oom; ++i) {
    block *b = &E->blocks[E->num_blocks];
    int previous;
    if (!recap__spec_get_name(L, node->keys[i], "block name", &b->name)) continue;
    if (!recap__names_put(&E->block_names, b->name, (int)E->num_blocks, &previous)) {
      L->oom = true;
      return;
    }
    if (previous >= 0) continue; /* a duplicate key: reported */
    E->num_blocks++;
    parse_block(E, node->keys[i], node->items[i], b);
  }
}

/* ---- uses -------------------------------------------------------------------------------- */

/* False when the count is not valid (reported, or the dim it names had errors of its own). */
static bool parse_count(expander *E, const recap__yaml_node *v, const char *what, use *u) {
  loader *L = E->L;
  int64_t n;
  if (recap__spec_parse_int(v, &n) != INT_OK && recap__spec_is_scalar(v) &&
      recap__names_get(&L->dims, v->text) >= 0) {
    /* A dim, so that --dim L=2 runs a smaller model. */
    const recap__spec_dim *d = &L->spec->dims[recap__names_get(&L->dims, v->text)];
    if (d->count == 0) return false;
    if (d->count > 1 || d->bucketed) {
      ERR(L, v->pos, "%s: count: dim '%s' has buckets; a count needs one value", what, d->name);
      return false;
    }
    n = d->values[0];
    if (n > MAX_BLOCK_COUNT) {
      ERR(L, v->pos, "%s: count: dim '%s' is %lld, more than the limit of %d instances", what,
          d->name, (long long)n, MAX_BLOCK_COUNT);
      return false;
    }
  } else {
    char count_what[MAX_NAME_BYTES + 128];
    snprintf(count_what, sizeof count_what, "%s: count (an integer or a dim's name)", what);
    if (!recap__spec_get_int(L, v, count_what, 1, MAX_BLOCK_COUNT, &n)) return false;
  }
  u->instances = (size_t)n;
  return true;
}

/* One entry of ops: that has a `block:` key. False on an error (reported). */
static bool parse_use(expander *E, size_t index, const recap__yaml_node *v, use *u,
                      recap__names *use_names) {
  loader *L = E->L;
  size_t errors = recap__diag_errors(L->diag);
  char what[MAX_NAME_BYTES + 64];
  snprintf(what, sizeof what, "block use (op #%zu)", index);
  recap__spec_check_keys(L, v, use_keys, what);
  const recap__yaml_node *bn = recap__spec_lookup(v, "block"),
                         *name = recap__spec_lookup(v, "name");
  int b = recap__spec_is_scalar(bn) ? recap__names_get(&E->block_names, bn->text) : -1;
  if (b < 0) {
    char names[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < E->num_blocks && used < sizeof names - 64; ++i)
      used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                               E->blocks[i].name);
    ERR(L, bn->pos, "%s: unknown block %s%.64s%s (blocks: %s)", what,
        recap__spec_is_scalar(bn) ? "'" : "",
        recap__spec_is_scalar(bn) ? bn->text : recap__yaml_describe(bn),
        recap__spec_is_scalar(bn) ? "'" : "", E->num_blocks ? names : "none declared");
    return false;
  }
  u->block = &E->blocks[b];
  u->block->used = true;
  if (!u->block->ok) return false; /* its errors are reported */
  u->name = u->block->name;
  if (name) recap__spec_get_name(L, name, "block use name", &u->name);
  snprintf(what, sizeof what, "block use '%s'", u->name);
  int previous;
  if (!recap__names_put(use_names, u->name, (int)index, &previous)) {
    L->oom = true;
    return false;
  }
  if (previous >= 0)
    ERR(L, (name ? name : bn)->pos,
        "%s: the name '%s' is already used by the block use at op #%d (give each use its own "
        "name:)",
        what, u->name, previous);
  bool ok = true;
  if (!(u->count = recap__spec_lookup(v, "count"))) {
    ERR(L, v->pos, "%s needs `count:`, how many instances of block '%s' it makes", what,
        u->block->name);
  } else {
    ok = parse_count(E, u->count, what, u);
  }
  const recap__yaml_node *ports[2] = {recap__spec_lookup(v, "in"), recap__spec_lookup(v, "out")};
  const char *port_keys[2] = {"in", "out"};
  for (int side = 0; side < 2; ++side) {
    char port_what[MAX_NAME_BYTES + 80];
    snprintf(port_what, sizeof port_what, "%s: %s", what, port_keys[side]);
    if (!ports[side]) {
      ERR(L, v->pos, "%s needs `%s:`, naming block '%s''s %s (%d tensor%s)", what, port_keys[side],
          u->block->name, side ? "outputs" : "inputs", u->block->num_ports,
          u->block->num_ports == 1 ? "" : "s");
      continue;
    }
    int n = get_ports(E, ports[side], port_what, side ? u->out : u->in);
    if (n >= 0 && n != u->block->num_ports)
      ERR(L, ports[side]->pos, "%s names %d tensor%s, but block '%s' has %d %s%s", port_what, n,
          n == 1 ? "" : "s", u->block->name, u->block->num_ports, side ? "output" : "input",
          u->block->num_ports == 1 ? "" : "s");
  }
  return ok && recap__diag_errors(L->diag) == errors && !L->oom;
}

/* Whether the expanded spec stays within the loader's limits on ops, tensors and YAML nodes,
 * checked before any copy is made; the error points at the count of the use that crosses one. */
static bool check_bounds(expander *E, const use *uses, size_t count, size_t declared,
                         const recap__yaml_node *root) {
  const recap__spec_options *o = &E->L->spec->options;
  size_t ops = 0, tensors = declared, nodes = count_nodes(root);
  for (size_t i = 0; i < count; ++i) {
    const use *u = &uses[i];
    if (!u->block) {
      ops += 1;
      tensors += count_op_outputs(u->node);
      continue;
    }
    const block *b = u->block;
    /* instances <= MAX_BLOCK_COUNT and each count below the YAML node limit: no overflow. */
    ops += u->instances * b->num_ops;
    tensors += u->instances * (b->num_tensors + b->num_op_outputs);
    nodes += u->instances * b->num_nodes;
    const char *what = ops > o->max_ops            ? "ops"
                       : tensors > o->max_tensors  ? "tensors (declared and op outputs)"
                       : nodes > o->yaml.max_nodes ? "YAML nodes"
                                                   : NULL;
    if (!what) continue;
    size_t total = ops > o->max_ops ? ops : tensors > o->max_tensors ? tensors : nodes;
    size_t limit = ops > o->max_ops           ? o->max_ops
                   : tensors > o->max_tensors ? o->max_tensors
                                              : o->yaml.max_nodes;
    ERR(E->L, u->count->pos,
        "block use '%s': %zu instances of block '%s' take the spec to %zu %s, more than the "
        "limit of %zu",
        u->name, u->instances, b->name, total, what, limit);
    return false;
  }
  return true;
}

/* ---- instances --------------------------------------------------------------------------- */

/* n's text with each {i} replaced by the instance's index and each {{ by {. A { that starts
 * anything else is an error at the brace: the text stays as written and the expansion goes on
 * (to report every bad template) but fails in the end. NULL when out of memory. */
static const char *substitute(expander *E, const recap__yaml_node *n, const instance *in) {
  const char *s = n->text;
  if (!memchr(s, '{', n->len)) return s;
  char digits[24];
  int nd = snprintf(digits, sizeof digits, "%zu", in->index);
  size_t size = 1;
  for (size_t r = 0; r < n->len; ++r) {
    if (s[r] != '{') {
      size += 1;
    } else if (r + 1 < n->len && s[r + 1] == '{') {
      size += 1;
      ++r;
    } else if (r + 2 < n->len && s[r + 1] == 'i' && s[r + 2] == '}') {
      size += (size_t)nd;
      r += 2;
    } else {
      recap__src_pos pos = recap__spec_scalar_offset_pos(E->L, n, r);
      pos.instance = in->label;
      ERR(E->L, pos,
          "bad index template in '%.64s': '{' starts {i} (the instance's index) or {{ (a "
          "literal '{')",
          s);
      E->failed = true;
      return s;
    }
  }
  char *out = tree_alloc(E, size);
  if (!out) return NULL;
  size_t w = 0;
  for (size_t r = 0; r < n->len; ++r) {
    if (s[r] == '{' && s[r + 1] == 'i') {
      memcpy(out + w, digits, (size_t)nd);
      w += (size_t)nd;
      r += 2;
    } else {
      out[w++] = s[r];
      r += s[r] == '{';
    }
  }
  out[w] = '\0';
  return out;
}

static void set_text(recap__yaml_node *n, const char *text) {
  if (!text) return;
  n->text = text;
  n->len = strlen(text);
}

/* A copy of n that belongs to the instance, with {i} replaced in its scalars if `templated`.
 * NULL when out of memory. */
static recap__yaml_node *copy_node(expander *E, const recap__yaml_node *n, const instance *in,
                                   bool templated) {
  recap__yaml_node *c = tree_alloc(E, sizeof *c);
  if (!c) return NULL;
  *c = *n;
  c->pos.instance = in->label;
  if (n->kind == RECAP_YAML_SCALAR) {
    const char *text = templated ? substitute(E, n, in) : n->text;
    if (!text) return NULL;
    if (text != n->text) set_text(c, text);
    return c;
  }
  c->items = tree_alloc(E, (n->count ? n->count : 1) * sizeof *c->items);
  c->keys = n->keys ? tree_alloc(E, (n->count ? n->count : 1) * sizeof *c->keys) : NULL;
  if (!c->items || (n->keys && !c->keys)) return NULL;
  for (size_t i = 0; i < n->count; ++i) {
    if (n->keys && !(c->keys[i] = copy_node(E, n->keys[i], in, false))) return NULL;
    if (!(c->items[i] = copy_node(E, n->items[i], in, templated))) return NULL;
  }
  return c;
}

/* A tensor name in an op of the block (in: or out:), as the instance names it: the previous
 * instance's output (or, for instance 0, the use's in:) for the block's input; the use's out:
 * for the last instance's output; "<use>.<i>.name" for the block's other names; outer names
 * as written (after {i}). A name the use gives keeps the use's position. */
static recap__yaml_node *copy_ref(expander *E, const recap__yaml_node *n, const instance *in) {
  recap__yaml_node *c = copy_node(E, n, in, true);
  if (!c || !recap__spec_is_scalar(c)) return c; /* the op check reports a non-name */
  const use *u = in->use;
  const block *b = u->block;
  const recap__yaml_node *given = NULL;
  int port;
  if ((port = recap__names_get(&b->input_names, c->text)) >= 0) {
    if (in->index == 0)
      given = u->in[port];
    else
      set_text(c, tree_format(E, "%s.%zu.%s", u->name, in->index - 1, b->outputs[port]->text));
  } else if ((port = recap__names_get(&b->output_names, c->text)) >= 0 &&
             in->index + 1 == u->instances) {
    given = u->out[port];
  } else if (recap__names_get(&b->locals, c->text) >= 0) {
    set_text(c, tree_format(E, "%s.%s", in->prefix, c->text));
  }
  if (given) *c = *given;
  return E->L->oom ? NULL : c;
}

/* in: or out: of an op: one name or a list of them. */
static recap__yaml_node *copy_refs(expander *E, const recap__yaml_node *n, const instance *in) {
  if (n->kind != RECAP_YAML_SEQUENCE) return copy_ref(E, n, in);
  recap__yaml_node *c = copy_node(E, n, in, false);
  for (size_t i = 0; c && i < n->count; ++i)
    if (!(c->items[i] = copy_ref(E, n->items[i], in))) return NULL;
  return c;
}

/* Whether `key` of an op of kind `op` is an expression attribute: its text is the expression
 * language's, where {i} would be a syntax error at a moved column, so it is copied as written. */
static bool is_expr_attr(const recap__yaml_node *op, const char *key) {
  const recap__op_def *def = recap__spec_is_scalar(op) ? recap__op_find(op->text) : NULL;
  for (const recap__attr_def *a = def ? def->attrs : NULL; a && a->name; ++a)
    if (a->kind == RECAP_ATTR_EXPR && !strcmp(a->name, key)) return true;
  return false;
}

/* The block's k-th op as the instance has it. */
static recap__yaml_node *copy_op(expander *E, const recap__yaml_node *n, const instance *in) {
  if (n->kind != RECAP_YAML_MAPPING) return copy_node(E, n, in, true);
  recap__yaml_node *c = copy_node(E, n, in, false); /* keys and structure; values below */
  const recap__yaml_node *kind = recap__spec_lookup(n, "op");
  for (size_t i = 0; c && i < n->count; ++i) {
    const char *key = n->keys[i]->text;
    const recap__yaml_node *v = n->items[i];
    if (!strcmp(key, "in") || !strcmp(key, "out")) {
      c->items[i] = copy_refs(E, v, in);
    } else if (!strcmp(key, "name")) {
      /* Checked as a name when the block was read. */
      if ((c->items[i] = copy_node(E, v, in, false)))
        set_text(c->items[i], tree_format(E, "%s.%s", in->prefix, v->text));
    } else {
      c->items[i] = copy_node(E, v, in, !is_expr_attr(kind, key));
    }
    if (!c->items[i]) return NULL;
  }
  return E->L->oom ? NULL : c;
}

/* Instance `index` of use u: its tensors appended to *tensors and its ops to *ops (with their
 * origins). False when out of memory. */
static bool instantiate(expander *E, const use *u, size_t index, recap__yaml_node *tensors,
                        recap__yaml_node *ops, recap__spec_op_origin *origins) {
  const block *b = u->block;
  instance in = {.use = u, .index = index};
  in.prefix = tree_format(E, "%s.%zu", u->name, index);
  in.label = tree_format(E, "%s (block '%s', i = %zu)", in.prefix, b->name, index);
  if (!in.prefix || !in.label) return false;
  for (size_t k = 0; k < b->num_tensors; ++k) {
    recap__yaml_node *key = copy_node(E, b->tensors->keys[k], &in, false),
                     *value = copy_node(E, b->tensors->items[k], &in, true);
    if (!key || !value) return false;
    set_text(key, tree_format(E, "%s.%s", in.prefix, key->text));
    tensors->keys[tensors->count] = key;
    tensors->items[tensors->count++] = value;
  }
  for (size_t k = 0; k < b->num_ops; ++k) {
    const recap__yaml_node *written = b->ops->items[k];
    const recap__yaml_node *kind =
        written->kind == RECAP_YAML_MAPPING ? recap__spec_lookup(written, "op") : NULL;
    recap__spec_op_origin *origin = &origins[ops->count];
    origin->written = written;
    origin->label =
        tree_format(E, "%s.%s#%zu", in.prefix, recap__spec_is_scalar(kind) ? kind->text : "op", k);
    if (!(ops->items[ops->count++] = copy_op(E, written, &in)) || !origin->label) return false;
  }
  return !E->L->oom;
}

/* The spec's tensors and ops with every use replaced by its instances. */
static bool expand(expander *E, const use *uses, const recap__yaml_node *root,
                   const recap__yaml_node **tensors, const recap__yaml_node **ops) {
  const recap__yaml_node *top_tensors = *tensors, *top_ops = *ops;
  size_t num_tensors = top_tensors ? top_tensors->count : 0, num_ops = 0;
  for (size_t i = 0; i < top_ops->count; ++i) {
    const use *u = &uses[i];
    num_ops += u->block ? u->instances * u->block->num_ops : 1;
    num_tensors += u->block ? u->instances * u->block->num_tensors : 0;
  }
  recap__yaml_node *t = tree_alloc(E, sizeof *t), *o = tree_alloc(E, sizeof *o);
  recap__spec_op_origin *origins = tree_alloc(E, num_ops * sizeof *origins);
  if (!t || !o || !origins) return false;
  *t = (recap__yaml_node){.kind = RECAP_YAML_MAPPING,
                          .pos = (top_tensors ? top_tensors : root)->pos};
  *o = *top_ops;
  o->count = 0;
  t->keys = tree_alloc(E, (num_tensors ? num_tensors : 1) * sizeof *t->keys);
  t->items = tree_alloc(E, (num_tensors ? num_tensors : 1) * sizeof *t->items);
  o->items = tree_alloc(E, num_ops * sizeof *o->items);
  if (!t->keys || !t->items || !o->items) return false;
  for (size_t i = 0; top_tensors && i < top_tensors->count; ++i) {
    t->keys[t->count] = top_tensors->keys[i];
    t->items[t->count++] = top_tensors->items[i];
  }
  for (size_t i = 0; i < top_ops->count; ++i) {
    const use *u = &uses[i];
    if (!u->block) {
      origins[o->count] = (recap__spec_op_origin){0};
      o->items[o->count++] = top_ops->items[i];
      continue;
    }
    for (size_t k = 0; k < u->instances; ++k)
      if (!instantiate(E, u, k, t, o, origins)) return false;
  }
  *tensors = t;
  *ops = o;
  E->L->op_origins = origins;
  return true;
}

bool recap__spec_expand_blocks(loader *L, const recap__yaml_node *root,
                               const recap__yaml_node **tensors, const recap__yaml_node **ops) {
  const recap__yaml_node *blocks = recap__spec_lookup(root, "blocks"), *top_ops = *ops;
  bool has_ops = top_ops && top_ops->kind == RECAP_YAML_SEQUENCE, has_uses = false;
  for (size_t i = 0; has_ops && i < top_ops->count; ++i)
    has_uses |= top_ops->items[i]->kind == RECAP_YAML_MAPPING &&
                recap__spec_lookup(top_ops->items[i], "block");
  if (!blocks && !has_uses) return true;

  expander E = {.L = L};
  size_t errors = recap__diag_errors(L->diag);
  if (blocks) parse_blocks(&E, blocks);
  use *uses = has_ops ? calloc(top_ops->count ? top_ops->count : 1, sizeof *uses) : NULL;
  recap__names use_names = {0};
  if (has_ops && !uses) L->oom = true;
  bool uses_ok = true;
  for (size_t i = 0; uses && i < top_ops->count && !L->oom; ++i) {
    const recap__yaml_node *v = top_ops->items[i];
    uses[i].node = v;
    if (v->kind == RECAP_YAML_MAPPING && recap__spec_lookup(v, "block") &&
        !parse_use(&E, i, v, &uses[i], &use_names))
      uses_ok = false;
  }
  if (*tensors && has_uses) recap__spec_expect_kind(L, *tensors, RECAP_YAML_MAPPING, "tensors");
  bool ok = uses_ok && recap__diag_errors(L->diag) == errors && !L->oom;
  /* Unused blocks are errors, as unused tensors are (most likely a use was meant and left
   * out), but the rest of the spec can be checked without them. */
  for (size_t i = 0; has_ops && i < E.num_blocks; ++i)
    if (!E.blocks[i].used)
      ERR(L, recap__spec_lookup_key(blocks, E.blocks[i].name)->pos,
          "block '%s' is declared but never used (no op has `block: %s`)", E.blocks[i].name,
          E.blocks[i].name);
  size_t declared = *tensors ? (*tensors)->count : 0;
  if (ok && has_uses) ok = check_bounds(&E, uses, top_ops->count, declared, root);
  if (ok && has_uses) ok = expand(&E, uses, root, tensors, ops) && !E.failed;
  recap__names_free(&use_names);
  free(uses);
  for (size_t i = 0; i < E.num_blocks; ++i) {
    recap__names_free(&E.blocks[i].locals);
    recap__names_free(&E.blocks[i].input_names);
    recap__names_free(&E.blocks[i].output_names);
  }
  free(E.blocks);
  recap__names_free(&E.block_names);
  /* Without a use, nothing is expanded: the rest of the spec can be checked. */
  return (ok || !has_uses) && !L->oom;
}
