/* op_run.c: single ops launched by the public API (recap_op_create, recap_op_launch,
 * recap_op_run in include/recap.h), over the op contracts: find, attribute defaults, the
 * caller's attributes parsed from spec-like text, infer, then prepare and launch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/recap.h"
#include "kernels/expr.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/error.h"

struct recap_op {
  recap__op_call call;
  recap__expr_program *program; /* an EXPR attribute's, owned */
  bool prepared;
  /* The workspace and call state the op asks for at its shapes, one block of scratch_device's
   * allocator (NULL: none asked for, or not launched yet). */
  void *scratch;
  recap_device scratch_device;
};

static const char *skip_space(const char *s) {
  while (*s == ' ' || *s == '\t') s++;
  return s;
}

/* The whole text is one number (surrounding spaces allowed). */
static bool parse_double(const char *text, double *out) {
  char *end;
  errno = 0;
  *out = strtod(text, &end);
  return end != text && errno == 0 && *skip_space(end) == '\0';
}

static bool parse_int(const char *text, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  *out = v;
  return end != text && errno == 0 && *skip_space(end) == '\0';
}

/* "[4, 8]" or "4, 8": at most RECAP_MAX_DIMS integers. */
static bool parse_int_list(const char *text, int64_t *values, int *count) {
  const char *s = skip_space(text);
  bool bracket = *s == '[';
  if (bracket) s = skip_space(s + 1);
  *count = 0;
  while (*s && *s != ']') {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno != 0 || *count == RECAP_MAX_DIMS) return false;
    values[(*count)++] = v;
    s = skip_space(end);
    if (*s == ',') s = skip_space(s + 1);
  }
  if (bracket != (*s == ']')) return false;
  return *count > 0 && *skip_space(bracket ? s + 1 : s) == '\0';
}

static bool parse_activation(const char *text, recap__activation *out) {
  static const char *const names[] = {"none", "relu",    "gelu", "gelu_tanh",
                                      "silu", "sigmoid", "tanh"};
  static const recap__activation values[] = {RECAP_ACT_NONE,      RECAP_ACT_RELU, RECAP_ACT_GELU,
                                             RECAP_ACT_GELU_TANH, RECAP_ACT_SILU, RECAP_ACT_SIGMOID,
                                             RECAP_ACT_TANH};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(text, names[i]) == 0) return *out = values[i], true;
  return false;
}

/* An EXPR value over the op's inputs, named as its def names them without the '?'. */
static recap_status parse_expr(recap_op *op, const char *text) {
  const recap__op_def *def = op->call.def;
  char names[RECAP_OP_MAX_INPUTS][32];
  const char *name_ptrs[RECAP_OP_MAX_INPUTS];
  int n = 0;
  for (; n < op->call.num_inputs && def->input_names && def->input_names[n]; n++) {
    snprintf(names[n], sizeof names[n], "%.*s", (int)strcspn(def->input_names[n], "?"),
             def->input_names[n]);
    name_ptrs[n] = names[n];
  }
  recap__expr_parse_error err;
  recap__expr_program_destroy(op->program);
  op->program = NULL;
  RECAP_TRY(recap__expr_parse(text, SIZE_MAX, name_ptrs, n, NULL, &op->program, &err));
  op->call.attrs.expr = op->program;
  return RECAP_OK;
}

static recap_status set_attr(recap_op *op, const recap_op_attr *given) {
  const recap__op_def *def = op->call.def;
  if (!given->name || !given->value)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': an attribute without a name or "
                      "value",
                      def->name);
  const recap__attr_def *a = def->attrs;
  while (a && a->name && strcmp(a->name, given->name) != 0) a++;
  if (!a || !a->name)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s' has no attribute '%s' (`recap ops "
                      "%s` lists them)",
                      def->name, given->name, def->name);
  char *field = (char *)&op->call.attrs + a->offset;
  const char *v = given->value;
  bool ok = true;
  switch (a->kind) {
    case RECAP_ATTR_FLOAT:
      ok = parse_double(v, (double *)field);
      break;
    case RECAP_ATTR_INT:
      ok = parse_int(v, (int64_t *)field);
      break;
    case RECAP_ATTR_BOOL:
      ok = strcmp(v, "true") == 0 || strcmp(v, "false") == 0;
      *(int *)field = strcmp(v, "true") == 0;
      break;
    case RECAP_ATTR_INT_LIST:
      ok = parse_int_list(v, (int64_t *)field, &op->call.attrs.num_sizes);
      break;
    case RECAP_ATTR_ACTIVATION:
      ok = parse_activation(v, (recap__activation *)field);
      break;
    case RECAP_ATTR_DTYPE:
      ok = recap_dtype_parse(v, (recap_dtype *)field) == RECAP_OK;
      break;
    case RECAP_ATTR_EXPR: {
      recap_status st = parse_expr(op, v);
      return st == RECAP_OK
                 ? st
                 : recap__error_context(st, "op '%s': attribute '%s': ", def->name, a->name);
    }
  }
  if (!ok)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': attribute '%s': cannot read "
                      "'%.64s'",
                      def->name, a->name, v);
  return RECAP_OK;
}

/* Every required attribute is among the given ones. */
static recap_status check_required(const recap__op_def *def, const recap_op_args *args) {
  for (const recap__attr_def *a = def->attrs; a && a->name; a++) {
    if (!a->required) continue;
    int i = 0;
    while (i < args->num_attrs &&
           !(args->attrs[i].name && strcmp(args->attrs[i].name, a->name) == 0))
      i++;
    if (i == args->num_attrs)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': attribute '%s' is required",
                        def->name, a->name);
  }
  return RECAP_OK;
}

recap_status recap_op_create(const char *name, const recap_op_args *args, recap_op **out) {
  RECAP_CHECK_ARG(args && out && args->num_inputs >= 0 && args->num_outputs >= 0 &&
                  args->num_attrs >= 0 && (args->inputs || args->num_inputs == 0) &&
                  (args->outputs || args->num_outputs == 0) &&
                  (args->attrs || args->num_attrs == 0));
  *out = NULL;
  const recap__op_def *def = recap__op_find(name);
  if (!def) return RECAP_STATUS_INVALID_ARGUMENT; /* the message suggests close names */
  if (args->num_inputs > RECAP_OP_MAX_INPUTS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': %d inputs (at most %d)", name,
                      args->num_inputs, RECAP_OP_MAX_INPUTS);
  recap_op *op = calloc(1, sizeof *op);
  if (!op) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for op '%s'", name);
  op->call.def = def;
  op->call.num_inputs = args->num_inputs;
  for (int i = 0; i < args->num_inputs; i++) op->call.inputs[i] = args->inputs[i];
  recap__op_attrs_set_defaults(def, &op->call.attrs);
  recap_status st = check_required(def, args);
  for (int i = 0; st == RECAP_OK && i < args->num_attrs; i++) st = set_attr(op, &args->attrs[i]);
  if (st == RECAP_OK) st = recap__op_infer(&op->call);
  if (st == RECAP_OK && op->call.num_outputs > args->num_outputs)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' has %d output%s, args give %d", name,
                    op->call.num_outputs, op->call.num_outputs == 1 ? "" : "s", args->num_outputs);
  if (st != RECAP_OK) {
    recap_op_destroy(op);
    return st;
  }
  for (int o = 0; o < op->call.num_outputs; o++) {
    op->call.outputs[o].data = args->outputs[o].data;
    args->outputs[o] = op->call.outputs[o];
  }
  for (int o = 0; o < op->call.num_outputs; o++) {
    const int aliased = recap__op_output_input(def, o);
    if (aliased >= 0) op->call.outputs[o].data = op->call.inputs[aliased].data;
  }
  *out = op;
  return RECAP_OK;
}

/* Gives the op the workspace and call state it asks for at its shapes (paged attention's
 * splits, sample's slices) at its first launch: one block from the stream's device allocator,
 * the state zeroed on the stream, kept for every later launch (a captured graph replays these
 * addresses). */
static recap_status bind_scratch(recap_op *op, recap_stream *stream) {
  const recap__op_def *def = op->call.def;
  const recap_device device = recap_stream_device(stream);
  if (op->scratch) {
    if (op->scratch_device.backend != device.backend || op->scratch_device.index != device.index)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s' holds its workspace on the device of its first launch; launch it "
                        "on a stream of that device",
                        def->name);
    return RECAP_OK;
  }
  const size_t workspace =
      def->workspace_bytes ? def->workspace_bytes(&op->call, device.backend) : 0;
  const size_t state = def->call_state_bytes ? def->call_state_bytes(&op->call, device.backend) : 0;
  if (workspace == 0 && state == 0) return RECAP_OK;
  if (recap_stream_is_capturing(stream))
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "op '%s' needs a workspace or call state at these shapes, allocated at its "
                      "first launch: launch it once before capturing",
                      def->name);
  const size_t state_at = (workspace + 255) / 256 * 256;
  void *block = NULL;
  recap_status st = recap_malloc(device, state_at + state, stream, &block);
  if (st != RECAP_OK)
    return recap__error_context(
        st, "op '%s': its workspace and call state (%zu bytes): ", def->name, state_at + state);
  if (state && (st = stream->backend->memset_async((char *)block + state_at, 0, state, stream)) !=
                   RECAP_OK) {
    recap_free(block);
    return st;
  }
  op->scratch = block;
  op->scratch_device = device;
  op->call.workspace = workspace ? block : NULL;
  op->call.workspace_bytes = workspace;
  op->call.call_state = state ? (char *)block + state_at : NULL;
  op->call.call_state_bytes = state;
  return RECAP_OK;
}

recap_status recap_op_launch(recap_op *op, recap_stream *stream) {
  RECAP_CHECK_ARG(op && stream);
  /* Before any memory is taken for the op: an op without its outputs never launches. */
  for (int o = 0; o < op->call.num_outputs; o++)
    if (!op->call.outputs[o].data)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s': output %d has no memory (recap_op_args.outputs[%d].data)",
                        op->call.def->name, o, o);
  RECAP_TRY(bind_scratch(op, stream));
  if (!op->prepared) {
    RECAP_TRY(recap__op_prepare(&op->call, stream));
    op->prepared = true;
  }
  return recap__op_launch(&op->call, stream);
}

void recap_op_destroy(recap_op *op) {
  if (!op) return;
  recap_free(op->scratch);
  recap__expr_program_destroy(op->program);
  free(op);
}

recap_status recap_op_run(const char *name, const recap_op_args *args, recap_stream *stream) {
  RECAP_CHECK_ARG(stream);
  recap_op *op;
  RECAP_TRY(recap_op_create(name, args, &op));
  recap_status st =
      op->program ? RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                               "recap_op_run: op '%s' has an expression, which must outlive its "
                               "launch: use recap_op_create, recap_op_launch and recap_op_destroy",
                               name)
                  : recap_op_launch(op, stream);
  recap_op_destroy(op);
  return st;
}
