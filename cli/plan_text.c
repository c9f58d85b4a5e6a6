/* plan_text.c: the text `recap plan` prints: the fused ops, then the memory plan (see
 * plan_text.h). Only the CLI shows it, so it lives here and not in the engine. */
#include "cli/plan_text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/fuse.h"
#include "runtime/error.h"
#include "runtime/text.h"

/* Names are optional in an IR built by hand: the text shows "?" for a missing one. */
static const char *shown(const char *name) {
  return name ? name : "?";
}

/* ---- the fused ops --------------------------------------------------------------------- */

/* "0-99", "3, 5, 7-9". */
static void put_ranges(recap__text *b, const int *ops, int count) {
  for (int i = 0; i < count;) {
    int j = i;
    while (j + 1 < count && ops[j + 1] == ops[j] + 1) ++j;
    recap__text_put(b, "%s%d", i ? ", " : "", ops[i]);
    if (j > i) recap__text_put(b, "-%d", ops[j]);
    i = j + 1;
  }
}

recap_status cli_fuse_format(const recap__ir *ir, bool enabled, char **text) {
  RECAP_CHECK_ARG(ir && text);
  recap__text b = {0};
  size_t groups = 0;
  for (size_t v = 0; v < ir->num_ops; ++v) groups += ir->ops[v].num_fused > 0;
  if (!enabled)
    recap__text_put(&b, "fusion: off (RECAP_FUSION=0 or --no-fusion)\n");
  else if (groups == 0)
    recap__text_put(&b, "fusion: on, nothing to fuse\n");
  else
    recap__text_put(&b, "fusion: %zu spec op%s became %zu fused op%s (%zu ops in all now)\n",
                    ir->fused_ops, ir->fused_ops == 1 ? "" : "s", groups, groups == 1 ? "" : "s",
                    ir->num_ops);
  for (size_t v = 0; v < ir->num_ops; ++v) {
    const recap__ir_op *op = &ir->ops[v];
    if (op->num_fused == 0) continue;
    recap__text_put(&b, "  op %zu '%s' (stream %d): spec op%s ", v, op->name, op->stream,
                    op->num_fused == 1 ? "" : "s");
    put_ranges(&b, op->fused_from, op->num_fused);
    recap__text_put(&b, " (%d)\n    in:", op->num_fused);
    const char *names[RECAP_OP_MAX_INPUTS];
    for (int i = 0; i < op->num_inputs; ++i) {
      names[i] = ir->tensors[op->inputs[i]].name;
      recap__text_put(&b, "%s %s", i ? "," : "", names[i]);
    }
    const recap__ir_tensor *y = &ir->tensors[op->outputs[0]];
    recap__text_put(&b, "  out: %s %s", y->name, recap_dtype_name(y->dtype));
    for (int o = 1; o < op->num_outputs; ++o)
      recap__text_put(&b, ", %s", ir->tensors[op->outputs[o]].name);
    recap__text_put(&b, "\n");
    if (op->num_outputs > 1 && op->def->takes_norm_epilogue) {
      recap__text_put(&b, "    = %s(%s), and rms_norm(%s, %s) of it as its second output\n",
                      op->def->name, names[0], y->name, names[op->num_inputs - 1]);
      continue;
    }
    if (!op->program && op->attrs.gated != RECAP_ACT_NONE) {
      const char *act = recap_op_activation_name((size_t)op->attrs.gated);
      recap__text_put(&b,
                      "    = %s(g) * u of [g | u] = %s(%s, %s%s%s), the gated unit in the GEMM's "
                      "epilogue\n",
                      act, op->def->name, names[0], names[1], op->num_inputs > 2 ? ", " : "",
                      op->num_inputs > 2 ? names[2] : "");
      continue;
    }
    if (!op->program) { /* a fold into a linear: its prologue and/or its residual */
      int last = op->num_inputs;
      const char *norm_weight = op->attrs.rms_norm ? names[--last] : NULL;
      const char *residual = op->attrs.residual ? names[--last] : NULL;
      recap__text_put(&b, "    = %s(", op->def->name);
      if (norm_weight)
        recap__text_put(&b, "rms_norm(%s, %s)", names[0], norm_weight);
      else if (op->attrs.glu != RECAP_ACT_NONE)
        recap__text_put(&b, "glu(%s)", names[0]);
      else
        recap__text_put(&b, "%s", names[0]);
      for (int i = 1; i < last; ++i) recap__text_put(&b, ", %s", names[i]);
      recap__text_put(&b, ")");
      if (residual) recap__text_put(&b, " + %s, the add in the GEMM's epilogue", residual);
      if (norm_weight || op->attrs.glu != RECAP_ACT_NONE)
        recap__text_put(&b, "%s the %s in its prologue", residual ? " and" : ",",
                        norm_weight ? "norm" : "gated unit");
      recap__text_put(&b, "\n");
      continue;
    }
    char *expr = NULL;
    recap_status st = recap__fuse_expression_text(ir, op, &expr);
    if (st != RECAP_OK) {
      free(b.data);
      return st;
    }
    /* At most 399 characters, as before: an expression is a line, not a page. */
    recap__text_put(&b, "    = %.399s%s\n", expr, strlen(expr) > 398 ? "..." : "");
    free(expr);
  }
  if (b.failed) {
    free(b.data);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion summary");
  }
  *text = b.data;
  return RECAP_OK;
}

/* ---- the memory plan ------------------------------------------------------------------- */

const char *cli_role_name(recap_tensor_role role) {
  switch (role) {
    case RECAP_ROLE_INPUT:
      return "input";
    case RECAP_ROLE_PARAM:
      return "param";
    case RECAP_ROLE_STATE:
      return "state";
    case RECAP_ROLE_SCALAR:
      return "scalar";
    case RECAP_ROLE_INTERMEDIATE:
      return "intermediate";
  }
  return "?";
}

/* "1.50 MiB (1572864 B)"-style size, into a caller's buffer. */
static const char *human(size_t bytes, char *out, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(out, cap, "%zu B", bytes);
  else
    snprintf(out, cap, "%.2f %s (%zu B)", v, units[u], bytes);
  return out;
}

/* Whether some op runs on stream s; stream 0, the pipeline's, counts always (the side streams
 * join it). */
static bool stream_used(const recap__ir *ir, const recap__plan *plan, int s) {
  for (size_t j = 0; s > 0 && j < plan->num_ops; j++)
    if (ir->ops[j].stream == s) return true;
  return s == 0;
}

recap_status cli_plan_format(const recap__ir *ir, const recap__plan *plan, char **text) {
  RECAP_CHECK_ARG(ir && plan && text);
  if (ir->num_tensors != plan->num_tensors || ir->num_ops != plan->num_ops)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the plan was made for another IR (%zu/%zu tensors, %zu/%zu ops)",
                      plan->num_tensors, ir->num_tensors, plan->num_ops, ir->num_ops);
  recap__text b = {0};
  char h1[64], h2[64], h3[64];
  size_t nt = plan->num_tensors ? plan->num_tensors : 1, num_views = 0;
  recap_tensor *views = malloc(nt * sizeof *views);
  int64_t *offsets = malloc(nt * sizeof *offsets);
  if (!views || !offsets) {
    free(views);
    free(offsets);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan's text");
  }
  /* The plan was checked when built; should its views not form for this IR, the table says
   * so by leaving their strides out. */
  recap_status views_st = recap__plan_views(ir, plan, views, offsets);
  if (views_st == RECAP_STATUS_OUT_OF_MEMORY) {
    free(views);
    free(offsets);
    return views_st;
  }
  if (views_st != RECAP_OK) {
    free(views);
    free(offsets);
    views = NULL;
    offsets = NULL;
  }
  for (size_t j = 0; j < plan->num_ops; j++) num_views += plan->op_is_view[j];
  /* Streams are numbered by the spec (0 to 63): count the ones in use, not the highest + 1. */
  int used = 0;
  for (int s = 0; s < plan->num_streams; s++) used += stream_used(ir, plan, s);
  recap__text_put(&b, "plan for '%s': %zu ops, %zu tensors, %d stream%s", shown(ir->name),
                  plan->num_ops, plan->num_tensors, used, used == 1 ? "" : "s");
  for (int s = 0, listed = 0; used > 1 && s < plan->num_streams; s++)
    if (stream_used(ir, plan, s)) recap__text_put(&b, "%s%d", listed++ ? ", " : " (", s);
  recap__text_put(&b, "%s, %zu arena buffer(s)\n", used > 1 ? ")" : "", plan->num_buffers);
  recap__text_put(
      &b, "views: %zu shape op(s) planned as views (they launch nothing and copy nothing)\n",
      num_views);
  for (size_t j = 0; j < plan->num_ops; j++)
    if (plan->op_copies_for_buckets[j])
      recap__text_put(&b,
                      "  '%s' copies: a view of it works in this bucket but not in a smaller one\n",
                      shown(ir->ops[j].name));
  if (plan->separate)
    recap__text_put(
        &b,
        "arena planning: off (RECAP_ARENA=0): no reuse, every intermediate buffer is its "
        "own allocation\n");
  recap__text_put(&b, "%-24s %-12s %12s %12s %-11s %-6s %s\n", "tensor", "role", "bytes", "offset",
                  "lifetime", "stream", "notes");
  /* Bytes in buffers of their own, outside the arena: outputs, then the other roles. */
  size_t own_outputs = 0, own_inputs = 0, own_params = 0, own_other = 0;
  for (size_t t = 0; t < plan->num_tensors; t++) {
    const recap__plan_tensor *pt = &plan->tensors[t];
    const recap__ir_tensor *x = &ir->tensors[t];
    char offset[32] = "-", life[32] = "-", stream[16] = "-";
    if (pt->kind == RECAP_PLAN_EXTERNAL) {
      size_t *sum = x->is_output                  ? &own_outputs
                    : x->role == RECAP_ROLE_INPUT ? &own_inputs
                    : x->role == RECAP_ROLE_PARAM ? &own_params
                                                  : &own_other;
      *sum = *sum > SIZE_MAX - pt->bytes ? SIZE_MAX : *sum + pt->bytes;
    }
    if (pt->buffer >= 0) snprintf(offset, sizeof offset, "%zu", pt->offset);
    if (pt->first_op >= 0) {
      if (pt->last_op >= (int)plan->num_ops)
        snprintf(life, sizeof life, "%d..end", pt->first_op);
      else
        snprintf(life, sizeof life, "%d..%d", pt->first_op, pt->last_op);
      snprintf(stream, sizeof stream, "%d", ir->ops[pt->first_op].stream);
    }
    recap__text_put(&b, "%-24s %-12s %12zu %12s %-11s %-6s", shown(ir->tensors[t].name),
                    cli_role_name(x->role), pt->bytes, offset, life, stream);
    switch (pt->kind) {
      case RECAP_PLAN_EXTERNAL:
        recap__text_put(&b, " own buffer");
        break;
      case RECAP_PLAN_ARENA:
        recap__text_put(&b, " buffer %d", pt->buffer);
        break;
      case RECAP_PLAN_IN_PLACE:
        recap__text_put(&b, " buffer %d, in place over '%s'", pt->buffer,
                        shown(ir->tensors[pt->shares_with].name));
        break;
      case RECAP_PLAN_VIEW:
        recap__text_put(&b, " view of '%s'", shown(ir->tensors[pt->shares_with].name));
        if (pt->view_op >= 0) {
          const recap__ir_op *op = &ir->ops[pt->view_op];
          bool backward = op->num_inputs > 0 && op->inputs[0] == (int)t;
          recap__text_put(&b, " (%s '%s', no copy", shown(op->def->name),
                          shown(ir->ops[pt->view_op].name));
          if (backward && x->producer >= 0)
            recap__text_put(&b, "; '%s' writes it in this layout",
                            shown(ir->ops[x->producer].name));
          recap__text_put(&b, ")");
        }
        if (views && offsets) {
          recap__text_put(&b, " strides [");
          for (int d = 0; d < views[t].ndim; d++)
            recap__text_put(&b, "%s%lld", d ? "," : "", (long long)views[t].strides[d]);
          recap__text_put(&b, "] at +%lld", (long long)offsets[t]);
        }
        if (pt->buffer >= 0) recap__text_put(&b, " (extends its buffer's lifetime)");
        break;
    }
    recap__text_put(&b, "%s\n", x->is_output ? ", output" : "");
  }
  int joins = 0;
  for (int s = 1; s < plan->num_streams; s++) joins += plan->stream_last_op[s] >= 0;
  if (plan->num_waits || joins)
    recap__text_put(&b, "waits (%zu between ops, %d end-of-pipeline join%s):\n", plan->num_waits,
                    joins, joins == 1 ? "" : "s");
  for (size_t w = 0; w < plan->num_waits; w++) {
    int a = plan->waits[w].waiter, c = plan->waits[w].waited;
    recap__text_put(&b, "  op %d '%s' (stream %d) waits for op %d '%s' (stream %d)\n", a,
                    shown(ir->ops[a].name), ir->ops[a].stream, c, shown(ir->ops[c].name),
                    ir->ops[c].stream);
  }
  for (int s = 1; s < plan->num_streams; s++)
    if (plan->stream_last_op[s] >= 0)
      recap__text_put(&b, "  end of pipeline joins stream %d after op %d '%s'\n", s,
                      plan->stream_last_op[s], shown(ir->ops[plan->stream_last_op[s]].name));
  recap__text_put(&b, "arena:    %s (intermediates that are not outputs)\n",
                  human(plan->arena_bytes, h1, sizeof h1));
  recap__text_put(&b, "naive:    %s (each of them in its own allocation)\n",
                  human(plan->naive_bytes, h2, sizeof h2));
  if (plan->live_at_one_op_bytes < plan->max_live_bytes) {
    char h4[64];
    recap__text_put(
        &b,
        "max live: %s (lower bound for any placement)\n"
        "          with streams: buffers another stream may still use count too; by op index "
        "alone, %s\n",
        human(plan->max_live_bytes, h3, sizeof h3),
        human(plan->live_at_one_op_bytes, h4, sizeof h4));
  } else {
    recap__text_put(&b, "max live: %s (lower bound for any placement)\n",
                    human(plan->max_live_bytes, h3, sizeof h3));
  }
  if (plan->naive_bytes)
    recap__text_put(
        &b, "saved:    %.1f%% of naive; arena is %.3fx the lower bound\n",
        100.0 * (1.0 - (double)plan->arena_bytes / (double)plan->naive_bytes),
        plan->max_live_bytes ? (double)plan->arena_bytes / (double)plan->max_live_bytes : 1.0);
  {
    char o[64], i[64], p[64], r[64];
    recap__text_put(&b, "own buffers: outputs %s, inputs %s, params %s, states and scalars %s\n",
                    human(own_outputs, o, sizeof o), human(own_inputs, i, sizeof i),
                    human(own_params, p, sizeof p), human(own_other, r, sizeof r));
  }
  free(views);
  free(offsets);
  if (b.failed) {
    free(b.data);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan's text");
  }
  *text = b.data;
  return RECAP_OK;
}
