/* spec_ops.c: the `ops:` list (op kinds, attributes, expressions, input and output references),
 * `outputs:`, and the tensors nobody uses (spec_internal.h). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/spec_internal.h"
#include "kernels/expr.h"
#include "kernels/infer.h"
#include "runtime/error.h"
#include "runtime/file.h"

/* ---- ops ------------------------------------------------------------------------------- */

static const char *const op_keys[] = {"op", "in", "out", "name", "stream", "shape", "dtype", NULL};

static void parse_attr(loader *L, recap__spec_op *op, const recap__attr_def *a,
                       const recap__yaml_node *v, const char *what) {
  char *field = (char *)&op->attrs + a->offset;
  char attr_what[MAX_NAME_BYTES + 160];
  snprintf(attr_what, sizeof attr_what, "%s: attribute '%s'", what, a->name);
  switch (a->kind) {
    case RECAP_ATTR_FLOAT:
      if (!recap__spec_get_float(L, v, attr_what, (double *)field)) op->ok = false;
      return;
    case RECAP_ATTR_BOOL:
      if (!recap__spec_get_bool(L, v, attr_what, (int *)field)) op->ok = false;
      return;
    case RECAP_ATTR_DTYPE:
      if (!recap__spec_get_dtype(L, v, attr_what, false, (recap_dtype *)field)) op->ok = false;
      return;
    case RECAP_ATTR_ACTIVATION: {
      static const char *const acts[] = {"none", "relu",    "gelu", "gelu_tanh",
                                         "silu", "sigmoid", "tanh", NULL};
      static const recap__activation values[] = {
          RECAP_ACT_NONE, RECAP_ACT_RELU,    RECAP_ACT_GELU, RECAP_ACT_GELU_TANH,
          RECAP_ACT_SILU, RECAP_ACT_SIGMOID, RECAP_ACT_TANH};
      int w = recap__spec_is_scalar(v) ? recap__spec_find_word(acts, v->text) : -1;
      if (w < 0) {
        ERR(L, v->pos,
            "%s: expected an activation (none, relu, gelu, gelu_tanh, silu, sigmoid, "
            "tanh), got %s%s%.64s%s",
            attr_what, recap__yaml_describe(v), recap__spec_is_scalar(v) ? " '" : "",
            recap__spec_is_scalar(v) ? v->text : "", recap__spec_is_scalar(v) ? "'" : "");
        op->ok = false;
      } else {
        *(recap__activation *)field = values[w];
      }
      return;
    }
    case RECAP_ATTR_EXPR:
      /* Needs the op's input names: parse_expr, called by parse_op. */
      return;
    case RECAP_ATTR_INT:
    case RECAP_ATTR_INT_LIST:
      break;
  }
  /* Integers may name dims, so they are resolved per bucket (ir.c). */
  if (op->num_int_attrs == RECAP__SPEC_MAX_INT_ATTRS) {
    ERR(L, v->pos, "%s: too many integer attributes", what);
    op->ok = false;
    return;
  }
  recap__spec_int_attr *ia = &op->int_attrs[op->num_int_attrs];
  ia->def = a;
  ia->pos = v->pos;
  if (a->kind == RECAP_ATTR_INT) {
    if (!recap__spec_get_size(L, v, attr_what, -(MAX_SIZE - 1), &ia->values[0])) {
      op->ok = false;
      return;
    }
    ia->count = 1;
  } else {
    if (!recap__spec_expect_kind(L, v, RECAP_YAML_SEQUENCE, attr_what)) {
      op->ok = false;
      return;
    }
    if (v->count < 1 || v->count > RECAP_MAX_DIMS) {
      ERR(L, v->pos, "%s has %zu entries, expected 1 to %d", attr_what, v->count, RECAP_MAX_DIMS);
      op->ok = false;
      return;
    }
    for (size_t i = 0; i < v->count; ++i)
      if (!recap__spec_get_size(L, v->items[i], attr_what, -(MAX_SIZE - 1), &ia->values[i])) {
        op->ok = false;
        return;
      }
    ia->count = (int)v->count;
  }
  op->num_int_attrs++;
}

/* ---- expressions ---------------------------------------------------------------------- */

/* The `expr:` attribute: parsed over the op's input names into a program the spec owns. */
static void parse_expr(loader *L, recap__spec_op *op, const recap__spec_op_origin *origin,
                       const recap__yaml_node *v, const char *what) {
  char attr_what[MAX_NAME_BYTES + 160];
  snprintf(attr_what, sizeof attr_what, "%s: attribute 'expr'", what);
  const char *text;
  if (!recap__spec_get_string(L, v, attr_what, &text)) {
    op->ok = false;
    return;
  }
  /* Inside a block, the expression names inputs as the block's text does (`x`, not the
   * instance's `layers.3.x`). */
  const recap__yaml_node *written = origin && origin->written->kind == RECAP_YAML_MAPPING
                                        ? recap__spec_lookup(origin->written, "in")
                                        : NULL;
  const char *names[RECAP_OP_MAX_INPUTS];
  for (int i = 0; i < op->num_inputs; ++i)
    names[i] = !written                               ? op->inputs[i].name
               : written->kind == RECAP_YAML_SEQUENCE ? written->items[i]->text
                                                      : written->text;
  recap__expr_parse_error err;
  recap__expr_program *program = NULL;
  recap_status st = recap__expr_parse(text, v->len, names, op->num_inputs, NULL, &program, &err);
  if (st == RECAP_STATUS_SPEC_ERROR) {
    ERR(L, recap__spec_scalar_offset_pos(L, v, err.offset), "%s: %s", attr_what, err.message);
    op->ok = false;
  } else if (st != RECAP_OK) {
    L->oom = true;
    op->ok = false;
  } else {
    op->attrs.expr = program;
  }
}

/* A list of tensor names, or one name. */
static int parse_refs(loader *L, const recap__yaml_node *v, const char *what, recap__spec_ref *refs,
                      int max, bool *ok) {
  size_t count = v->kind == RECAP_YAML_SEQUENCE ? v->count : 1;
  if (v->kind == RECAP_YAML_MAPPING ||
      (v->kind == RECAP_YAML_SCALAR && !recap__spec_is_scalar(v))) {
    ERR(L, v->pos, "%s: expected a tensor name or a list of them, got %s", what,
        recap__yaml_describe(v));
    *ok = false;
    return 0;
  }
  if (count > (size_t)max) {
    ERR(L, v->pos, "%s: %zu tensors, at most %d", what, count, max);
    *ok = false;
    return 0;
  }
  int n = 0;
  for (size_t i = 0; i < count; ++i) {
    const recap__yaml_node *e = v->kind == RECAP_YAML_SEQUENCE ? v->items[i] : v;
    recap__spec_ref *r = &refs[n];
    r->index = -1;
    r->pos = e->pos;
    if (!recap__spec_get_name(L, e, what, &r->name)) {
      *ok = false;
      continue;
    }
    n++;
  }
  return n;
}

static void parse_op(loader *L, size_t index, const recap__yaml_node *v, recap__spec_op *op) {
  recap__spec *spec = L->spec;
  const recap__spec_op_origin *origin =
      L->op_origins && L->op_origins[index].written ? &L->op_origins[index] : NULL;
  char what[MAX_NAME_BYTES + 64];
  if (origin)
    snprintf(what, sizeof what, "op '%s'", origin->label);
  else
    snprintf(what, sizeof what, "op #%zu", index);
  op->pos = v->pos;
  op->ok = true;
  if (!recap__spec_expect_kind(L, v, RECAP_YAML_MAPPING, what)) {
    op->ok = false;
    return;
  }
  const recap__yaml_node *opn = recap__spec_lookup(v, "op");
  if (!opn) {
    ERR(L, v->pos, "%s needs an `op:` key naming the operation (`recap ops` lists them)", what);
    op->ok = false;
  } else if (!recap__spec_is_scalar(opn)) {
    ERR(L, opn->pos, "%s: op: expected an op name, got %s", what, recap__yaml_describe(opn));
    op->ok = false;
  } else {
    op->def = recap__op_find(opn->text);
    if (!op->def) {
      ERR(L, opn->pos, "%s", recap_last_error());
      op->ok = false;
    } else if (!origin) {
      snprintf(what, sizeof what, "op '%s'", op->def->name);
    }
  }
  const recap__yaml_node *name = recap__spec_lookup(v, "name");
  if (name) {
    if (recap__spec_get_name(L, name, "op name", &op->name))
      snprintf(what, sizeof what, "op '%s'", op->name);
    else
      op->ok = false;
  } else if (origin) {
    op->name = origin->label;
  }

  /* Keys: the op-level ones, then the def's attributes (`shape` and `dtype` are attributes
   * of the ops that have them, and checks of the output otherwise). */
  const recap__op_def *def = op->def;
  const recap__yaml_node *expr_node = NULL;
  recap__op_attrs_set_defaults(def, &op->attrs);
  if (def) {
    for (const recap__attr_def *a = def->attrs; a && a->name; ++a)
      if (a->kind == RECAP_ATTR_DTYPE && !a->required)
        *(recap_dtype *)((char *)&op->attrs + a->offset) = spec->dtype;
  }
  const char *accepted[32];
  size_t na = 0;
  for (size_t i = 0; op_keys[i]; ++i) accepted[na++] = op_keys[i];
  for (const recap__attr_def *a = def ? def->attrs : NULL; a && a->name && na < 31; ++a)
    if (strcmp(a->name, "shape") && strcmp(a->name, "dtype")) accepted[na++] = a->name;
  accepted[na] = NULL;
  char context[MAX_NAME_BYTES + 64];
  snprintf(context, sizeof context, "%s", what);
  recap__spec_check_keys(L, v, def ? accepted : NULL, context);

  for (size_t i = 0; def && i < v->count; ++i) {
    const char *key = v->keys[i]->text;
    const recap__yaml_node *val = v->items[i];
    const recap__attr_def *a = NULL;
    for (const recap__attr_def *x = def->attrs; x && x->name; ++x)
      if (strcmp(x->name, key) == 0) a = x;
    if (a && a->kind == RECAP_ATTR_EXPR) {
      /* Parsed once the input names are known (below). */
      if (recap__spec_lookup_key(v, key) == v->keys[i]) expr_node = val;
    } else if (a) {
      if (recap__spec_lookup_key(v, key) == v->keys[i]) parse_attr(L, op, a, val, what);
    } else if (!strcmp(key, "shape")) {
      op->check_shape_pos = val->pos;
      if (!recap__spec_expect_kind(L, val, RECAP_YAML_SEQUENCE, "shape")) {
        op->ok = false;
      } else if (val->count < 1 || val->count > RECAP_MAX_DIMS) {
        ERR(L, val->pos, "%s: shape has 1 to %d sizes, got %zu", what, RECAP_MAX_DIMS, val->count);
        op->ok = false;
      } else {
        bool ok = true;
        for (size_t j = 0; j < val->count; ++j)
          if (!recap__spec_get_size(L, val->items[j], "shape", 1, &op->check_dims[j])) ok = false;
        if (ok) {
          op->check_shape = true;
          op->check_ndim = (int)val->count;
        } else {
          op->ok = false;
        }
      }
    } else if (!strcmp(key, "dtype")) {
      op->check_dtype_pos = val->pos;
      if (recap__spec_get_dtype(L, val, what, false, &op->check_dtype_value))
        op->check_dtype = true;
      else
        op->ok = false;
    }
  }
  for (const recap__attr_def *a = def ? def->attrs : NULL; a && a->name; ++a)
    if (a->required && !recap__spec_lookup(v, a->name)) {
      ERR(L, v->pos, "%s needs attribute '%s' (%s)", what, a->name, a->doc ? a->doc : "");
      op->ok = false;
    }

  const recap__yaml_node *st = recap__spec_lookup(v, "stream");
  int64_t stream = 0;
  if (st && !recap__spec_get_int(L, st, "stream", 0, MAX_STREAMS - 1, &stream)) op->ok = false;
  op->stream = (int)stream;

  const recap__yaml_node *in = recap__spec_lookup(v, "in"), *out = recap__spec_lookup(v, "out");
  bool refs_ok = true;
  if (in) op->num_inputs = parse_refs(L, in, "in", op->inputs, RECAP_OP_MAX_INPUTS, &refs_ok);
  if (!refs_ok) op->ok = false;
  if (expr_node && refs_ok && op->num_inputs >= 1) parse_expr(L, op, origin, expr_node, what);
  if (def && op->ok && (op->num_inputs < def->min_inputs || op->num_inputs > def->max_inputs)) {
    char names[256];
    recap__spec_join_names(def->input_names, names, sizeof names);
    if (def->min_inputs == def->max_inputs)
      ERR(L, in ? in->pos : v->pos, "%s takes %d input%s (%s), got %d", what, def->min_inputs,
          def->min_inputs == 1 ? "" : "s", names, op->num_inputs);
    else
      ERR(L, in ? in->pos : v->pos, "%s takes %d to %d inputs (%s), got %d", what, def->min_inputs,
          def->max_inputs, names, op->num_inputs);
    op->ok = false;
  }
  if (!out) {
    ERR(L, v->pos, "%s needs `out:` naming its output tensor", what);
    op->ok = false;
  } else {
    op->num_outputs = parse_refs(L, out, "out", op->outputs, RECAP_OP_MAX_OUTPUTS, &op->ok);
    if (out->kind == RECAP_YAML_SEQUENCE && out->count == 0) {
      ERR(L, out->pos, "%s: out: lists no tensor", what);
      op->ok = false;
    }
  }
}

static const char *op_label(const recap__spec_op *op, size_t index, char *buf, size_t size) {
  if (op->name)
    snprintf(buf, size, "'%s'", op->name);
  else
    snprintf(buf, size, "'%s#%zu'", op->def ? op->def->name : "op", index);
  return buf;
}

static bool add_tensor_slot(loader *L, size_t *capacity) {
  recap__spec *spec = L->spec;
  if (spec->num_tensors < *capacity) return true;
  size_t grown = *capacity * 2 + 16;
  recap__spec_tensor *tensors = realloc(spec->tensors, grown * sizeof *tensors);
  if (!tensors) {
    L->oom = true;
    return false;
  }
  memset(tensors + *capacity, 0, (grown - *capacity) * sizeof *tensors);
  spec->tensors = tensors;
  *capacity = grown;
  return true;
}

void recap__spec_parse_ops(loader *L, const recap__yaml_node *node, size_t *tensor_capacity) {
  recap__spec *spec = L->spec;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_SEQUENCE, "ops")) return;
  if (node->count > spec->options.max_ops) {
    ERR(L, node->pos, "the spec has %zu ops, more than the limit of %zu", node->count,
        spec->options.max_ops);
    return;
  }
  if (node->count == 0) {
    ERR(L, node->pos, "ops: the list is empty (a spec needs at least one op)");
    return;
  }
  spec->ops = calloc(node->count, sizeof *spec->ops);
  if (!spec->ops) {
    L->oom = true;
    return;
  }
  spec->num_ops = node->count;
  for (size_t i = 0; i < node->count && !L->oom; ++i) parse_op(L, i, node->items[i], &spec->ops[i]);
  if (L->oom) return;

  /* Op names are unique; every output is named once, so "used before defined" can say
   * which op defines it. */
  recap__names op_names = {0};
  for (size_t i = 0; i < spec->num_ops && !L->oom; ++i) {
    recap__spec_op *op = &spec->ops[i];
    int previous;
    if (op->name) {
      if (!recap__names_put(&op_names, op->name, (int)i, &previous))
        L->oom = true;
      else if (previous >= 0)
        ERR(L, recap__spec_lookup(node->items[i], "name")->pos,
            "op name '%s' is already used by op #%d "
            "(line %d)",
            op->name, previous, spec->ops[previous].pos.line);
    }
    for (int o = 0; o < op->num_outputs; ++o)
      if (!recap__names_put(&L->future, op->outputs[o].name, (int)i, &previous)) L->oom = true;
  }
  recap__names_free(&op_names);

  for (size_t i = 0; i < spec->num_ops && !L->oom; ++i) {
    recap__spec_op *op = &spec->ops[i];
    char label[MAX_NAME_BYTES + 32];
    op_label(op, i, label, sizeof label);
    for (int j = 0; j < op->num_inputs; ++j) {
      recap__spec_ref *r = &op->inputs[j];
      r->index = recap__names_get(&L->tensors, r->name);
      if (r->index >= 0) {
        spec->tensors[r->index].consumers++;
        continue;
      }
      int later = recap__names_get(&L->future, r->name);
      char later_label[MAX_NAME_BYTES + 32];
      if (later >= 0)
        ERR(L, r->pos,
            "op %s uses tensor '%s' before it is defined (op %s at line %d "
            "produces it)",
            label, r->name,
            op_label(&spec->ops[later], (size_t)later, later_label, sizeof later_label),
            spec->ops[later].pos.line);
      else
        ERR(L, r->pos,
            "op %s: unknown tensor '%s' (not declared under tensors: nor produced "
            "by an op)",
            label, r->name);
      op->ok = false;
    }
    for (int j = 0; j < op->num_outputs; ++j) {
      recap__spec_ref *r = &op->outputs[j];
      int previous = recap__names_get(&L->tensors, r->name);
      if (previous >= 0) {
        const recap__spec_tensor *t = &spec->tensors[previous];
        ERR(L, r->pos,
            "op %s: tensor '%s' is already defined (line %d); every tensor has one "
            "producer",
            label, r->name, t->pos.line);
        op->ok = false;
        continue;
      }
      if (spec->num_tensors >= spec->options.max_tensors) {
        ERR(L, r->pos, "the spec has more than %zu tensors (the limit)", spec->options.max_tensors);
        op->ok = false;
        return;
      }
      if (!add_tensor_slot(L, tensor_capacity)) return;
      r->index = (int)spec->num_tensors;
      recap__spec_tensor *t = &spec->tensors[spec->num_tensors++];
      t->name = r->name;
      t->pos = r->pos;
      t->role = RECAP_ROLE_INTERMEDIATE;
      t->producer = (int)i;
      if (!recap__names_put(&L->tensors, r->name, r->index, &previous)) L->oom = true;
    }
  }
}

void recap__spec_parse_outputs(loader *L, const recap__yaml_node *node) {
  recap__spec *spec = L->spec;
  spec->outputs_given = true;
  if (!recap__spec_expect_kind(L, node, RECAP_YAML_SEQUENCE, "outputs")) return;
  if (node->count == 0) {
    ERR(L, node->pos, "outputs: the list is empty");
    return;
  }
  spec->outputs = calloc(node->count, sizeof *spec->outputs);
  if (!spec->outputs) {
    L->oom = true;
    return;
  }
  recap__names seen = {0};
  for (size_t i = 0; i < node->count; ++i) {
    recap__spec_ref *r = &spec->outputs[spec->num_outputs];
    r->pos = node->items[i]->pos;
    r->index = -1;
    if (!recap__spec_get_name(L, node->items[i], "outputs", &r->name)) continue;
    int previous;
    if (!recap__names_put(&seen, r->name, (int)i, &previous)) {
      L->oom = true;
      break;
    }
    if (previous >= 0) {
      ERR(L, r->pos, "outputs: tensor '%s' is listed twice", r->name);
      continue;
    }
    r->index = recap__names_get(&L->tensors, r->name);
    if (r->index < 0) ERR(L, r->pos, "outputs: unknown tensor '%s'", r->name);
    spec->num_outputs++;
  }
  recap__names_free(&seen);
}

/* Whether output `out` of op is one of its inputs' memory (output_is_input); false for a name
 * past the outputs the op has. */
static bool aliases_input(const recap__spec_op *op, int out) {
  return op->def && out < op->def->num_outputs && recap__op_output_input(op->def, out) >= 0;
}

void recap__spec_check_usage(loader *L) {
  recap__spec *spec = L->spec;
  bool *listed = calloc(spec->num_tensors ? spec->num_tensors : 1, sizeof *listed);
  if (!listed) {
    L->oom = true;
    return;
  }
  for (size_t i = 0; i < spec->num_outputs; ++i)
    if (spec->outputs[i].index >= 0) listed[spec->outputs[i].index] = true;
  size_t defaults = 0;
  for (size_t i = 0; i < spec->num_tensors; ++i) {
    const recap__spec_tensor *t = &spec->tensors[i];
    if (t->consumers || listed[i]) continue;
    if (t->producer < 0) {
      ERR(L, t->pos, "tensor '%s' is declared but never used", t->name);
      continue;
    }
    const recap__spec_op *op = &spec->ops[t->producer];
    int out = 0;
    while (op->outputs[out].index != (int)i) ++out;
    /* An op that writes into an input (kv_append into its cache) has done its work even if
     * nothing reads the result. A spec may name more outputs than the op has (the IR says so):
     * those are not asked about. */
    if (aliases_input(op, out)) continue;
    if (spec->outputs_given)
      ERR(L, t->pos,
          "tensor '%s' is computed but never used (no later op reads it and "
          "outputs: does not list it)",
          t->name);
    else
      defaults++;
  }
  if (!spec->outputs_given && defaults) {
    spec->outputs = calloc(defaults, sizeof *spec->outputs);
    if (!spec->outputs) {
      L->oom = true;
    } else {
      for (size_t i = 0; i < spec->num_tensors; ++i) {
        const recap__spec_tensor *t = &spec->tensors[i];
        if (t->consumers || t->producer < 0) continue;
        const recap__spec_op *op = &spec->ops[t->producer];
        int out = 0;
        while (op->outputs[out].index != (int)i) ++out;
        if (aliases_input(op, out)) continue;
        spec->outputs[spec->num_outputs++] = (recap__spec_ref){t->name, t->pos, (int)i};
      }
    }
  }
  free(listed);
}
