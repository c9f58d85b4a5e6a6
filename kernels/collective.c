/*
 * collective.c: the collective ops: all_reduce, all_gather, reduce_scatter, broadcast.
 *
 * They run on the communicator of their stream's device (comm/comm.h): NCCL on CUDA,
 * enqueued on the op's stream, so a capture records them as graph nodes; a device without a
 * communicator, and the host backend, are a world of 1, where each op is a copy (or nothing,
 * when the planner ran it in place). all_gather and reduce_scatter change the first axis by
 * the world size, which shape inference needs before any device exists: their `world`
 * attribute gives it (a dim name such as W, overridden per run), and the launch checks it
 * against the communicator.
 *
 * Attribute slots: recap__op_attrs is one struct for every op, copied into every call, so these
 * ops reuse its integer slots rather than grow it: `world` is attrs.dim, `root` attrs.start,
 * `average` attrs.causal. The attribute table keeps the spec-facing names.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "kernels/collective.h"

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"
#include "kernels/op.h"
#include "comm/comm.h"
#include "runtime/error.h"

/* rmsnorm's definition (kernels/reduce.c): an all_reduce's norm runs as its call. */
extern const recap__op_def recap__op_rmsnorm;

static const char *const one_input[] = {"x", NULL};
static const char *const all_reduce_inputs[] = {"x", "norm_weight?", NULL};

static const recap__attr_def all_reduce_attrs[] = {
    {"average", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, causal), false, 0,
     "divide the sum by the world size"},
    {"eps", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, eps), false, 1e-6,
     "with norm_weight: added to the mean square of the second output's RMSNorm"},
    {.name = NULL},
};
static const recap__attr_def gather_attrs[] = {
    {"world", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), false, 1,
     "ranks in the world (the output's first axis is world x the input's)"},
    {.name = NULL},
};
static const recap__attr_def reduce_scatter_attrs[] = {
    {"world", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), false, 1,
     "ranks in the world (the input's first axis is world x the output's)"},
    {"average", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, causal), false, 0,
     "divide the sum by the world size"},
    {.name = NULL},
};
static const recap__attr_def broadcast_attrs[] = {
    {"root", RECAP_ATTR_INT, offsetof(recap__op_attrs, start), false, 0,
     "the rank whose tensor every rank receives"},
    {.name = NULL},
};

enum { CODE_ALL_REDUCE, CODE_ALL_GATHER, CODE_REDUCE_SCATTER, CODE_BROADCAST };

static recap_status check_common(recap__op_call *call) {
  if (!recap__tensor_is_contiguous(&call->inputs[0]))
    return RECAP_OP_FAIL(call, "input 'x' must be contiguous (collectives move whole buffers)");
  return RECAP_OK;
}

static recap_status check_world(recap__op_call *call) {
  if (call->attrs.dim < 1 || call->attrs.dim > 65536)
    return RECAP_OP_FAIL(call, "attribute 'world' = %lld: expected 1 to 65536",
                         (long long)call->attrs.dim);
  return RECAP_OK;
}

static recap_status same_infer(recap__op_call *call) {
  RECAP_TRY(check_common(call));
  if (call->def->code == CODE_BROADCAST && (call->attrs.start < 0 || call->attrs.start >= 65536))
    return RECAP_OP_FAIL(call, "attribute 'root' = %lld is not a rank",
                         (long long)call->attrs.start);
  const recap_tensor *x = &call->inputs[0];
  recap__infer_output(call, 0, x->dtype, x->ndim, x->shape);
  return RECAP_OK;
}

/* all_reduce: the sum, and with a norm weight (its second input) also the sum's RMSNorm as a
 * second output, as rmsnorm computes it from the sum rounded to x's dtype. */
static recap_status all_reduce_infer(recap__op_call *call) {
  RECAP_TRY(same_infer(call));
  call->num_outputs = 1;
  if (call->num_inputs < 2) return RECAP_OK;
  const recap_tensor *x = &call->inputs[0];
  if (!recap_dtype_is_float(x->dtype))
    return RECAP_OP_FAIL(call, "input 'norm_weight' needs a floating-point 'x' (has %s)",
                         recap_dtype_name(x->dtype));
  RECAP_TRY(recap__infer_norm_param(call, 1));
  RECAP_TRY(recap__infer_eps(call));
  recap__infer_output(call, 1, x->dtype, x->ndim, x->shape);
  call->num_outputs = 2;
  return RECAP_OK;
}

/* The RMSNorm that an all_reduce with a norm weight computes as its second output: rmsnorm's
 * own call over the sum (output 0) and the weight. */
static recap__op_call norm_call(const recap__op_call *call) {
  recap__op_call n = {.def = &recap__op_rmsnorm, .num_inputs = 2, .num_outputs = 1};
  n.inputs[0] = call->outputs[0];
  n.inputs[1] = call->inputs[1];
  n.outputs[0] = call->outputs[1];
  n.attrs.eps = call->attrs.eps;
  return n;
}

/* After a collective on the host: an all_reduce's norm, when it has one. */
static recap_status norm_on_host(const recap__op_call *call) {
  if (call->num_outputs < 2) return RECAP_OK;
  recap__op_call n = norm_call(call);
  return recap__host_rmsnorm(&n);
}

static recap_status all_gather_infer(recap__op_call *call) {
  RECAP_TRY(check_common(call));
  RECAP_TRY(check_world(call));
  const recap_tensor *x = &call->inputs[0];
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  if (shape[0] > ((int64_t)1 << 40) / call->attrs.dim)
    return RECAP_OP_FAIL(call, "the gathered first axis is too large");
  shape[0] *= call->attrs.dim;
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  return RECAP_OK;
}

static recap_status reduce_scatter_infer(recap__op_call *call) {
  RECAP_TRY(check_common(call));
  RECAP_TRY(check_world(call));
  const recap_tensor *x = &call->inputs[0];
  if (x->shape[0] % call->attrs.dim != 0)
    return RECAP_OP_FAIL(call, "input 'x' %s: the first axis must divide by world = %lld",
                         recap__shape_label(x).s, (long long)call->attrs.dim);
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[0] /= call->attrs.dim;
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  return RECAP_OK;
}

/* The collective of a bound call. */
static recap__coll describe(const recap__op_call *call, int *world_attr) {
  const recap_tensor *x = &call->inputs[0], *y = &call->outputs[0];
  recap__coll c = {RECAP__COLL_ALL_REDUCE,
                   x->data,
                   y->data,
                   (size_t)recap__tensor_numel(y),
                   x->dtype,
                   call->attrs.causal ? RECAP_REDUCE_AVG : RECAP_REDUCE_SUM,
                   0};
  *world_attr = 0; /* any world */
  switch (call->def->code) {
    case CODE_ALL_GATHER:
      c.kind = RECAP__COLL_ALL_GATHER;
      c.count = (size_t)recap__tensor_numel(x);
      *world_attr = (int)call->attrs.dim;
      break;
    case CODE_REDUCE_SCATTER:
      c.kind = RECAP__COLL_REDUCE_SCATTER;
      *world_attr = (int)call->attrs.dim;
      break;
    case CODE_BROADCAST:
      c.kind = RECAP__COLL_BROADCAST;
      c.root = (int)call->attrs.start;
      break;
    default:
      break;
  }
  return c;
}

/* The installed host world (collective.h): the handler and its context, set together. */
typedef struct {
  recap__host_collective_fn fn;
  void *ctx;
} host_world;
static _Atomic(host_world *) g_host_world;

void recap__collective_set_host_handler(recap__host_collective_fn fn, void *ctx) {
  /* A static slot per setting: the handler is installed by one test at a time, so the one a
   * running op read stays valid until the next call. */
  static host_world slot;
  if (!fn) {
    atomic_store(&g_host_world, NULL);
    return;
  }
  slot = (host_world){fn, ctx};
  atomic_store(&g_host_world, &slot);
}

/* The host backend is a world of 1, where every collective is a copy, unless a test installed
 * a world of several ranks (collective.h). */
static recap_status collective_run_host(const recap__op_call *call) {
  int world_attr;
  recap__coll c = describe(call, &world_attr);
  host_world *world = atomic_load(&g_host_world);
  if (world) {
    recap_status st = world->fn(world->ctx, &c, world_attr);
    if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", call->def->name);
    return norm_on_host(call);
  }
  if ((world_attr > 1) || c.root != 0)
    return RECAP_OP_FAIL(call,
                         "the host backend is a world of 1 (this op was planned for %s %d): run "
                         "each rank's spec on a GPU of its own (recap launch --gpus N -- "
                         "COMMAND SPEC.rank{rank}.yaml, docs/MULTI_GPU.md)",
                         world_attr > 1 ? "a world of" : "root",
                         world_attr > 1 ? world_attr : c.root);
  size_t bytes =
      (size_t)recap__tensor_numel(&call->outputs[0]) * recap_dtype_size(call->outputs[0].dtype);
  if (c.send != c.recv) memmove(c.recv, c.send, bytes);
  return norm_on_host(call);
}

/* Refuses, at warmup and before anything runs, a call planned for a world its stream's device
 * does not have: a rank's spec of a tensor-parallel model run on its own. Caught at its launch
 * instead, the failure would leave the device refusing all later work (a fault). A test that
 * installed a host world checks the world in its handler. */
static recap_status collective_prepare(const recap__op_call *call, recap_stream *stream) {
  int world_attr;
  (void)describe(call, &world_attr);
  if (world_attr <= 1) return RECAP_OK;
  const recap_device device = recap_stream_device(stream);
  if (device.backend == RECAP_BACKEND_HOST && atomic_load(&g_host_world)) return RECAP_OK;
  const recap_comm *comm = recap__comm_for_device(device);
  const int world = comm ? recap_comm_world_size(comm) : 1;
  if (world == world_attr) return RECAP_OK;
  /* recap__op_prepare names the op. */
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "it was planned for a world of %d ranks and %s:%d is in a world of %d: a "
                    "tensor-parallel model runs one spec per rank, all at once (recap launch "
                    "--gpus %d -- COMMAND SPEC.rank{rank}.yaml, docs/MULTI_GPU.md)",
                    world_attr, recap_backend_name(device.backend), device.index, world,
                    world_attr);
}

#if RECAP_WITH_CUDA
static recap_status collective_launch_cuda(const recap__op_call *call, void *stream) {
  int world_attr;
  recap__coll c = describe(call, &world_attr);
  return recap__comm_launch_native(&c, world_attr, stream);
}

/* all_reduce: one kernel over the communicator's peer buffers where it has them and the sum
 * fits (the norm inside it too), else NCCL and then the norm's own kernel. */
static recap_status all_reduce_launch_cuda(const recap__op_call *call, void *stream) {
  bool done = false;
  RECAP_TRY(recap__cuda_all_reduce_oneshot(call, recap__comm_peer_view(stream), stream, &done));
  if (done) return RECAP_OK;
  RECAP_TRY(collective_launch_cuda(call, stream));
  if (call->num_outputs < 2) return RECAP_OK;
  recap__op_call n = norm_call(call);
  return recap__cuda_rmsnorm(&n, stream);
}
#endif

#define COLLECTIVE_DEF(op, code_, summary_, attrs_, infer_, in_place) \
  const recap__op_def recap__op_##op = {                              \
      .name = #op,                                                    \
      .summary = summary_,                                            \
      .code = code_,                                                  \
      .input_names = one_input,                                       \
      .min_inputs = 1,                                                \
      .max_inputs = 1,                                                \
      .num_outputs = 1,                                               \
      .attrs = attrs_,                                                \
      .dtype_mask = RECAP__DTYPES_ALL,                                \
      .in_place_input = in_place,                                     \
      .infer = infer_,                                                \
      .run_host = collective_run_host,                                \
      .launch_cuda = RECAP_CUDA_ENTRY(collective_launch_cuda),        \
      .prepare = collective_prepare,                                  \
  }

const recap__op_def recap__op_all_reduce = {
    .name = "all_reduce",
    .summary = "sum (or average) of x over every rank, on every rank (NCCL, or one kernel over "
               "peer buffers for small sums; a copy in a world of 1); with norm_weight also its "
               "RMSNorm, as a second output",
    .code = CODE_ALL_REDUCE,
    .input_names = all_reduce_inputs,
    .min_inputs = 1,
    .max_inputs = 2,
    .num_outputs = 2,
    .attrs = all_reduce_attrs,
    .dtype_mask = RECAP__DTYPES_ALL,
    .in_place_input = 0,
    /* Every rank holds the whole sum, so a norm of it costs no launch of its own. */
    .takes_norm_epilogue = true,
    .one_call_per_communicator = true,
    .infer = all_reduce_infer,
    .run_host = collective_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(all_reduce_launch_cuda),
};
COLLECTIVE_DEF(all_gather, CODE_ALL_GATHER,
               "every rank's x stacked along the first axis, rank order (NCCL)", gather_attrs,
               all_gather_infer, -1);
COLLECTIVE_DEF(reduce_scatter, CODE_REDUCE_SCATTER,
               "the sum over ranks of x, split along the first axis: rank r keeps part r (NCCL)",
               reduce_scatter_attrs, reduce_scatter_infer, -1);
COLLECTIVE_DEF(broadcast, CODE_BROADCAST, "the root rank's x, on every rank (NCCL)",
               broadcast_attrs, same_infer, 0);
