/* work.c: how much a pipeline computes per run, estimated from its IR, and the warning that
 * run and bench give before a host-backend run that would take very long. */
#include <stdio.h>

#include "cli/cli.h"
#include "kernels/op.h"

/* Rough host-backend rates, measured on the 2-core build machine (mlp_large at H=1024:
 * 55 GFLOP/s; the transformer block: 30; mlp_decode's weight-bound GEMMs: about 3 GB/s). An
 * estimate only has to say minutes or hours, not seconds. */
static const double HOST_FLOPS_PER_S = 50e9, HOST_BYTES_PER_S = 3e9;
/* Above this many estimated seconds for all runs, the CLI warns before it starts. */
static const double HOST_WARN_SECONDS = 60;

static void shape_of(const recap__ir_tensor *t, recap_tensor *out) {
  *out = (recap_tensor){.dtype = t->dtype, .ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++) out->shape[d] = t->shape[d];
}

static double numel(const recap__ir_tensor *t) {
  double n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (double)t->shape[d];
  return n;
}

void cli_work_estimate(const recap__ir *ir, cli_work *out) {
  *out = (cli_work){0, 0};
  for (size_t o = 0; o < ir->num_ops; o++) {
    const recap__ir_op *op = &ir->ops[o];
    /* The op's shapes as a call (no data): what its contract's flops reads. */
    recap__op_call call = {.def = op->def,
                           .num_inputs = op->num_inputs,
                           .num_outputs = op->num_outputs,
                           .attrs = op->attrs};
    for (int i = 0; i < op->num_inputs; i++) shape_of(&ir->tensors[op->inputs[i]], &call.inputs[i]);
    for (int i = 0; i < op->num_outputs; i++)
      shape_of(&ir->tensors[op->outputs[i]], &call.outputs[i]);
    if (op->def->flops) {
      out->flops += op->def->flops(&call);
    } else {
      /* One per element; reductions read more than they write. */
      double n = numel(&ir->tensors[op->outputs[0]]);
      if (op->num_inputs > 0 && numel(&ir->tensors[op->inputs[0]]) > n)
        n = numel(&ir->tensors[op->inputs[0]]);
      out->flops += n;
    }
    for (int i = 0; i < op->num_inputs; i++) out->bytes += (double)ir->tensors[op->inputs[i]].bytes;
    for (int i = 0; i < op->num_outputs; i++)
      out->bytes += (double)ir->tensors[op->outputs[i]].bytes;
  }
}

bool cli_warn_host_work(const char *cmd, const char *path, const recap__ir *ir, int runs) {
  cli_work w;
  cli_work_estimate(ir, &w);
  double seconds = runs * (w.flops / HOST_FLOPS_PER_S + w.bytes / HOST_BYTES_PER_S);
  if (seconds < HOST_WARN_SECONDS) return false;
  bool tera = w.flops >= 1e12, hours = seconds >= 2 * 3600;
  fprintf(stderr,
          "recap %s: warning: %s does about %.3g %s per run and moves %.3g GB; the host "
          "backend (CPU) computes some %.0f GFLOP/s, so its %d runs (warmups included) may take "
          "%.0f %s or more. --iters N, --warmup N and --dim (a smaller batch or width) shrink "
          "it.\n",
          cmd, path, w.flops / (tera ? 1e12 : 1e9), tera ? "TFLOP" : "GFLOP", w.bytes / 1e9,
          HOST_FLOPS_PER_S / 1e9, runs, hours ? seconds / 3600 : seconds / 60, hours ? "h" : "min");
  return true;
}
