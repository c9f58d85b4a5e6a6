/* op_info.c: the public face of the op registry (recap_op_info, recap_op_attr_info in
 * include/recap.h), read from the op contracts (op.h). */
#include <stdio.h>
#include <string.h>

#include "include/recap.h"
#include "kernels/op.h"
#include "runtime/error.h"

/* The public kinds, in the order of recap__attr_kind. */
static recap_op_attr_kind public_kind(recap__attr_kind kind) {
  switch (kind) {
    case RECAP_ATTR_FLOAT:
      return RECAP_OP_ATTR_FLOAT;
    case RECAP_ATTR_INT:
      return RECAP_OP_ATTR_INT;
    case RECAP_ATTR_BOOL:
      return RECAP_OP_ATTR_BOOL;
    case RECAP_ATTR_INT_LIST:
      return RECAP_OP_ATTR_INT_LIST;
    case RECAP_ATTR_ACTIVATION:
      return RECAP_OP_ATTR_ACTIVATION;
    case RECAP_ATTR_DTYPE:
      return RECAP_OP_ATTR_DTYPE;
    case RECAP_ATTR_EXPR:
      break;
  }
  return RECAP_OP_ATTR_EXPR;
}

/* In the order of recap__activation, which RECAP_OP_ATTR_ACTIVATION defaults index. */
static const char *const acts[] = {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"};

const char *recap_op_activation_name(size_t index) {
  return index < sizeof acts / sizeof acts[0] ? acts[index] : NULL;
}

/* The default as a spec would write it. */
static void format_default(const recap__attr_def *a, char *buf, size_t size) {
  if (a->required) {
    snprintf(buf, size, "required");
    return;
  }
  switch (a->kind) {
    case RECAP_ATTR_FLOAT:
      snprintf(buf, size, "%g", a->default_value);
      return;
    case RECAP_ATTR_INT:
      snprintf(buf, size, "%lld", (long long)a->default_value);
      return;
    case RECAP_ATTR_BOOL:
      snprintf(buf, size, "%s", a->default_value != 0 ? "true" : "false");
      return;
    case RECAP_ATTR_ACTIVATION: {
      int v = (int)a->default_value;
      snprintf(buf, size, "%s", v >= 0 && v < (int)(sizeof acts / sizeof acts[0]) ? acts[v] : "?");
      return;
    }
    case RECAP_ATTR_DTYPE:
      /* The loader gives every optional dtype attribute the spec's dtype (spec_ops.c). */
      snprintf(buf, size, "spec's");
      return;
    case RECAP_ATTR_INT_LIST:
    case RECAP_ATTR_EXPR:
      break;
  }
  snprintf(buf, size, "(none)");
}

static size_t attr_count(const recap__op_def *def) {
  size_t n = 0;
  while (def->attrs && def->attrs[n].name) n++;
  return n;
}

static void fill_info(size_t index, const recap__op_def *def, recap_op_info *out) {
  static const char *const no_inputs[] = {NULL};
  *out = (recap_op_info){.index = index,
                         .name = def->name,
                         .summary = def->summary ? def->summary : "",
                         .input_names = def->input_names ? def->input_names : no_inputs,
                         .min_inputs = def->min_inputs,
                         .max_inputs = def->max_inputs,
                         .num_outputs = def->num_outputs,
                         .dtype_mask = def->dtype_mask,
                         .in_place_input = def->in_place_input,
                         .is_random = def->is_random,
                         .num_attrs = attr_count(def)};
}

size_t recap_op_count(void) {
  size_t count = 0;
  recap__op_list(&count);
  return count;
}

recap_status recap_op_info_get(size_t index, recap_op_info *out) {
  size_t count = 0;
  const recap__op_def *const *all = recap__op_list(&count);
  if (!out || index >= count)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no op %zu (the registry has %zu)", index,
                      count);
  fill_info(index, all[index], out);
  return RECAP_OK;
}

recap_status recap_op_info_find(const char *name, recap_op_info *out) {
  RECAP_CHECK_ARG(out);
  const recap__op_def *def = recap__op_find(name); /* its message names close ones */
  if (!def) return RECAP_STATUS_INVALID_ARGUMENT;
  size_t count = 0;
  const recap__op_def *const *all = recap__op_list(&count);
  size_t index = 0;
  while (index < count && all[index] != def) index++;
  fill_info(index, def, out);
  return RECAP_OK;
}

recap_status recap_op_attr_info_get(size_t op_index, size_t attr_index, recap_op_attr_info *out) {
  size_t count = 0;
  const recap__op_def *const *all = recap__op_list(&count);
  if (!out || op_index >= count || attr_index >= attr_count(all[op_index]))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no attribute %zu of op %zu", attr_index,
                      op_index);
  const recap__attr_def *a = &all[op_index]->attrs[attr_index];
  *out = (recap_op_attr_info){.name = a->name,
                              .kind = public_kind(a->kind),
                              .required = a->required,
                              .doc = a->doc ? a->doc : ""};
  if (!a->required && a->kind != RECAP_ATTR_INT_LIST && a->kind != RECAP_ATTR_EXPR)
    out->default_value = a->default_value;
  format_default(a, out->default_text, sizeof out->default_text);
  return RECAP_OK;
}
