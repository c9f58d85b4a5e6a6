/* dot.c: `recap dot SPEC [--graph]`: the pipeline's DAG, or its captured graph, as Graphviz. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/plan_text.h"
#include "engine/plan.h"

static const char *const CMD = "dot";

static const cli_option dot_options[] = {
    {.flag = "--graph",
     .kind = CLI_VALUE_NONE,
     .help = "capture the pipeline and write the captured graph instead (the\n"
             "backend's dump: cudaGraphDebugDotPrint on CUDA)"},
    {.flag = "--dim",
     .value = "NAME=VALUE",
     .kind = CLI_VALUE_TEXT,
     .help = "for the bucketed dim: show the bucket that runs a batch of VALUE (default:\n"
             "the largest); for any other dim: replaces the spec's value (repeatable;\n"
             "as in recap run)"},
    {.flag = "--entry",
     .value = "NAME",
     .kind = CLI_VALUE_TEXT,
     .help = "use the dims of the spec's entry NAME (`entries:`), before --dim"},
    {.flag = "--device",
     .value = "D",
     .kind = CLI_VALUE_WORDS,
     .words = "cuda host",
     .help = "cuda or host, for --graph (default: the spec's; host when there is\n"
             "no GPU)"},
    {.flag = "-o",
     .value = "FILE",
     .kind = CLI_VALUE_FILE,
     .help = "write to FILE instead of standard output"},
    {.flag = "--base-dir",
     .value = "DIR",
     .kind = CLI_VALUE_DIR,
     .help = "files the spec names (params) must lie under DIR (for specs from\n"
             "untrusted sources)"},
    {0}};
const cli_help cli_dot_help = {
    .synopsis =
        "recap dot SPEC [--graph] [--dim NAME=VALUE] [--device cuda|host] [-o FILE]\n"
        "        [--entry NAME] [--base-dir DIR]",
    .description =
        "Writes the pipeline as Graphviz (render with `dot -Tsvg`). By default the DAG of the\n"
        "spec: ops grouped by stream, tensors that are not produced by an op as nodes, data\n"
        "edges labelled with tensor and shape, and the cross-stream waits the planner inserts\n"
        "(dashed).",
    .operand = CLI_VALUE_SPEC,
    .groups = {{.options = dot_options}},
};

/* Graphviz double-quoted string contents. */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s, f);
  }
}

static void put_shape(FILE *f, const recap__ir_tensor *t) {
  fprintf(f, "%s [", recap_dtype_name(t->dtype));
  for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  fputc(']', f);
}

static const char *role_color(recap_tensor_role role) {
  switch (role) {
    case RECAP_ROLE_INPUT:
      return "#cfe2ff";
    case RECAP_ROLE_PARAM:
      return "#e9ecef";
    case RECAP_ROLE_STATE:
      return "#fff3cd";
    case RECAP_ROLE_SCALAR:
      return "#f8d7da";
    case RECAP_ROLE_INTERMEDIATE:
      break;
  }
  return "#d1e7dd";
}

static void write_dag(FILE *f, const recap__ir *ir, const recap__plan *plan) {
  fprintf(f, "digraph \"");
  put_escaped(f, ir->name);
  fprintf(f,
          "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [fontname=\"Helvetica\", fontsize=9];\n");
  /* Tensors that no op produces, and outputs, are nodes; the rest are edge labels. */
  for (size_t t = 0; t < ir->num_tensors; t++) {
    const recap__ir_tensor *x = &ir->tensors[t];
    if (x->producer >= 0 && !x->is_output) continue;
    fprintf(f, "  t%zu [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"", t,
            x->is_output ? role_color(RECAP_ROLE_INTERMEDIATE) : role_color(x->role));
    put_escaped(f, x->name);
    fprintf(f, "\\n%s ", x->is_output ? "output" : cli_role_name(x->role));
    put_shape(f, x);
    fprintf(f, "\"];\n");
  }
  for (int s = 0; s < ir->num_streams; s++) {
    /* Streams are the spec's numbers (0 to 63): draw only those with ops. */
    bool used = false;
    for (size_t o = 0; o < ir->num_ops && !used; o++) used = ir->ops[o].stream == s;
    if (!used) continue;
    fprintf(f, "  subgraph cluster_stream%d {\n    label=\"stream %d%s\";\n    style=rounded;\n", s,
            s, s == 0 ? " (the pipeline's)" : "");
    for (size_t o = 0; o < ir->num_ops; o++) {
      const recap__ir_op *op = &ir->ops[o];
      if (op->stream != s) continue;
      bool view = plan->op_is_view[o];
      fprintf(f, "    op%zu [shape=box, style=\"rounded%s\", label=\"", o, view ? ",dashed" : "");
      /* Unnamed ops are called "<op>#<index>": the op's name would only repeat it. */
      size_t n = strlen(op->def->name);
      bool named = !(strncmp(op->name, op->def->name, n) == 0 && op->name[n] == '#');
      put_escaped(f, op->name);
      if (named) fprintf(f, "\\n%s", op->def->name);
      fprintf(f, "%s\"];\n", view ? "\\n(view: no launch)" : "");
    }
    fprintf(f, "  }\n");
  }
  for (size_t o = 0; o < ir->num_ops; o++) {
    const recap__ir_op *op = &ir->ops[o];
    for (int i = 0; i < op->num_inputs; i++) {
      int t = op->inputs[i];
      const recap__ir_tensor *x = &ir->tensors[t];
      if (x->producer < 0 || x->is_output) {
        fprintf(f, "  t%d -> op%zu;\n", t, o);
        continue;
      }
      fprintf(f, "  op%d -> op%zu [label=\"", x->producer, o);
      put_escaped(f, x->name);
      fputc(' ', f);
      put_shape(f, x);
      const recap__plan_tensor *pt = &plan->tensors[t];
      if (pt->kind == RECAP_PLAN_IN_PLACE) fprintf(f, "\\nin place");
      fprintf(f, "\"];\n");
    }
    for (int k = 0; k < op->num_outputs; k++)
      if (ir->tensors[op->outputs[k]].is_output) fprintf(f, "  op%zu -> t%d;\n", o, op->outputs[k]);
  }
  for (size_t w = 0; w < plan->num_waits; w++)
    fprintf(f,
            "  op%d -> op%d [style=dashed, color=\"#c0392b\", label=\"wait\", constraint=false];\n",
            plan->waits[w].waited, plan->waits[w].waiter);
  fprintf(f, "}\n");
}

/* Captures a pipeline of the model and copies the backend's dump of bucket `bucket` to
 * `out`. */
static int write_captured(FILE *out, recap__model *model, size_t bucket) {
  recap_pipeline_options opts = {.struct_size = sizeof opts,
                                 .override_device = 1,
                                 .device = model->device,
                                 .override_mode = 1,
                                 .mode = RECAP_MODE_GRAPH};
  int rc = CLI_EXIT_FAILURE;
  recap_pipeline *p = NULL;
  char tmp[] = "/tmp/recap_dot_XXXXXX";
  int fd = -1;
  FILE *in = NULL;
  recap_status st;
  if ((st = recap__pipeline_create_model(model, &opts, &p)) != RECAP_OK) {
    cli_report_failure(CMD, "creating the pipeline", st);
    goto done;
  }
  if ((st = recap_pipeline_capture(p)) != RECAP_OK) {
    cli_report_failure(CMD, "capturing", st);
    goto done;
  }
  const recap_graph *g = NULL;
  if ((st = recap_pipeline_graph(p, bucket, &g)) != RECAP_OK) {
    cli_report_failure(CMD, "finding the graph", st);
    goto done;
  }
  if (!g) {
    fprintf(stderr,
            "recap %s: bucket %zu was not captured (graphs are off: "
            "RECAP_DISABLE_GRAPHS?)\n",
            CMD, bucket);
    goto done;
  }
  if ((fd = mkstemp(tmp)) < 0) {
    perror("recap dot: mkstemp");
    goto done;
  }
  if ((st = recap_graph_debug_dump(g, tmp)) != RECAP_OK) {
    cli_report_failure(CMD, "dumping the graph", st);
    goto done;
  }
  if (!(in = fopen(tmp, "r"))) {
    perror("recap dot: reading the dump");
    goto done;
  }
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, out);
  rc = CLI_EXIT_OK;
done:
  if (in) fclose(in);
  if (fd >= 0) {
    close(fd);
    unlink(tmp);
  }
  recap_pipeline_destroy(p);
  return rc;
}

int cli_dot_main(int argc, char **argv) {
  if (cli_wants_help(argc, argv)) {
    cli_help_print(stdout, &cli_dot_help);
    return CLI_EXIT_OK;
  }
  const char *path = NULL, *device = NULL, *out_path = NULL, *base_dir = NULL, *entry = NULL;
  const char *dims[CLI_MAX_DIMS];
  int num_dims = 0;
  bool graph = false;
  for (int i = 0; i < argc; i++) {
    int m;
    if ((m = cli_flag(CMD, argc, argv, &i, "--graph", NULL)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
      graph = true;
    } else if ((m = cli_dim_flag(CMD, argc, argv, &i, dims, &num_dims)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if ((m = cli_flag(CMD, argc, argv, &i, "--device", &device)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "-o", &out_path)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--base-dir", &base_dir)) != 0 ||
               (m = cli_flag(CMD, argc, argv, &i, "--entry", &entry)) != 0) {
      if (m < 0) return CLI_EXIT_USAGE;
    } else if (!cli_take_one(CMD, "spec", argv[i], &path)) {
      return CLI_EXIT_USAGE;
    }
  }
  if (!path) {
    cli_help_print(stderr, &cli_dot_help);
    return CLI_EXIT_USAGE;
  }
  if (device && !graph) {
    fprintf(stderr, "recap %s: --device only applies with --graph\n", CMD);
    return CLI_EXIT_USAGE;
  }

  recap__model *model = NULL;
  FILE *out = stdout;
  size_t bucket;
  int64_t batch;
  /* The DAG is the spec's own, so it is shown unfused; a captured graph is what the engine
   * runs, fused. The engine plans all buckets at once and every bucket runs on that plan: its
   * waits and views are the ones shown, over the chosen bucket's shapes. */
  cli_load_request load = {.path = path,
                           .base_dir = base_dir,
                           .dims = dims,
                           .num_dims = num_dims,
                           .entry = entry,
                           .device = device,
                           .capacity = graph ? RECAP__CAPACITY_REQUIRED : RECAP__CAPACITY_OFF,
                           .no_fusion = !graph};
  int rc = cli_load(CMD, &load, &model, &bucket, &batch);
  if (rc != CLI_EXIT_OK) goto done;
  rc = CLI_EXIT_FAILURE;
  if (out_path && !(out = fopen(out_path, "w"))) {
    cli_report_write_failure(CMD, out_path, errno);
    out = stdout;
    goto done;
  }
  if (graph) {
    rc = write_captured(out, model, bucket);
    goto done;
  }
  write_dag(out, model->irs[bucket], model->plan);
  rc = CLI_EXIT_OK;
done:
  if (out != stdout && fclose(out) != 0 && rc == CLI_EXIT_OK) {
    fprintf(stderr, "recap %s: writing %s failed\n", CMD, out_path);
    rc = CLI_EXIT_FAILURE;
  }
  recap__model_release(model);
  return rc;
}
