/*
 * launch.c: the op library's entry points, recap__op_infer, recap__op_launch and
 * recap__op_prepare.
 *
 * Infer checks what every op shares (input counts, well-formed tensors, the dtype mask, a
 * bounded element count) so each def's infer checks only what is particular to it. Launch
 * picks the backend from the stream: host ops go through the backend's launch_kernel, so a
 * host stream capture records them as graph nodes exactly as CUDA records kernels; CUDA
 * ops call the def's CUDA entry point on the stream's cudaStream_t. Prepare runs an op's
 * first-time work before capture, for the ops that have any.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/infer.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/error.h"
#include "runtime/rng.h"

/* "1 input (x)" or "2 to 3 inputs (x, weight, bias?)" for count errors. */
static recap__label expected_inputs(const recap__op_def *def) {
  recap__label label;
  size_t n = 0;
  int w =
      def->min_inputs == def->max_inputs
          ? snprintf(label.s, sizeof label.s, "%d input%s", def->min_inputs,
                     def->min_inputs == 1 ? "" : "s")
          : snprintf(label.s, sizeof label.s, "%d to %d inputs", def->min_inputs, def->max_inputs);
  if (w < 0 || (size_t)w >= sizeof label.s) return label;
  n = (size_t)w;
  for (int i = 0; def->input_names && def->input_names[i]; ++i) {
    w = snprintf(label.s + n, sizeof label.s - n, "%s%s", i ? ", " : " (", def->input_names[i]);
    if (w < 0 || (size_t)w >= sizeof label.s - n) return label;
    n += (size_t)w;
  }
  if (def->input_names && def->input_names[0]) snprintf(label.s + n, sizeof label.s - n, ")");
  return label;
}

static recap__label dtype_list(unsigned mask) {
  recap__label label;
  size_t n = 0;
  label.s[0] = '\0';
  for (int d = 0; d < RECAP_DTYPE_COUNT; ++d) {
    if (!(mask & (1u << d))) continue;
    int w = snprintf(label.s + n, sizeof label.s - n, "%s%s", n ? ", " : "",
                     recap_dtype_name((recap_dtype)d));
    if (w < 0 || (size_t)w >= sizeof label.s - n) break;
    n += (size_t)w;
  }
  return label;
}

recap_status recap__op_infer(recap__op_call *call) {
  RECAP_CHECK_ARG(call && call->def && call->def->infer);
  const recap__op_def *def = call->def;
  if (call->num_inputs < def->min_inputs || call->num_inputs > def->max_inputs ||
      call->num_inputs > RECAP_OP_MAX_INPUTS)
    return RECAP_OP_FAIL(call, "takes %s, got %d", expected_inputs(def).s, call->num_inputs);

  for (int i = 0; i < call->num_inputs; ++i) {
    const recap_tensor *t = &call->inputs[i];
    if (!recap_dtype_name(t->dtype))
      return RECAP_OP_FAIL(call, "input '%s' has an invalid dtype (%d)",
                           recap__input_label(def, i).s, (int)t->dtype);
    int64_t numel;
    recap_status st = recap__tensor_checked_numel(t, &numel);
    if (st != RECAP_OK)
      return recap__error_context(st, "op '%s': input '%s' %s: ", def->name,
                                  recap__input_label(def, i).s, recap__shape_label(t).s);
  }

  recap_dtype main = call->num_inputs > 0 ? call->inputs[0].dtype : call->attrs.dtype;
  if (!recap_dtype_name(main) || !(def->dtype_mask & (1u << main))) {
    if (call->num_inputs > 0)
      return RECAP_OP_FAIL(call,
                           "input '%s' has dtype %s, which this op does not support "
                           "(supported: %s)",
                           recap__input_label(def, 0).s, recap__dtype_label(main).s,
                           dtype_list(def->dtype_mask).s);
    return RECAP_OP_FAIL(call, "attribute 'dtype' = %s is not supported (supported: %s)",
                         recap__dtype_label(main).s, dtype_list(def->dtype_mask).s);
  }

  call->num_outputs = def->num_outputs;
  RECAP_TRY(def->infer(call));

  for (int o = 0; o < call->num_outputs; ++o) {
    int64_t numel;
    recap_status st = recap__tensor_checked_numel(&call->outputs[o], &numel);
    if (st != RECAP_OK)
      return recap__error_context(st, "op '%s': output %d %s: ", def->name, o,
                                  recap__shape_label(&call->outputs[o]).s);
  }
  return RECAP_OK;
}

/* The host "kernel": launch_kernel hands it its own copy of the call, so a captured node keeps
 * the parameters it was launched with (as a CUDA kernel node keeps its arguments). */
static recap_status host_trampoline(void *args) {
  const recap__op_call *call = args;
  return call->def->run_host(call);
}

recap_status recap__op_launch(recap__op_call *call, recap_stream *stream) {
  RECAP_CHECK_ARG(call && call->def && stream && stream->backend);
  const recap__op_def *def = call->def;
  if (call->num_inputs < 0 || call->num_inputs > RECAP_OP_MAX_INPUTS || call->num_outputs < 0 ||
      call->num_outputs > RECAP_OP_MAX_OUTPUTS)
    return RECAP_OP_FAIL(call,
                         "bad tensor counts (%d inputs, %d outputs): run recap__op_infer "
                         "first",
                         call->num_inputs, call->num_outputs);
  for (int i = 0; i < call->num_inputs; ++i)
    if (!call->inputs[i].data)
      return RECAP_OP_FAIL(call, "input '%s' is not bound to memory", recap__input_label(def, i).s);
  for (int o = 0; o < call->num_outputs; ++o)
    if (!call->outputs[o].data) return RECAP_OP_FAIL(call, "output %d is not bound to memory", o);

  bool host = stream->backend->kind == RECAP_BACKEND_HOST;
  if (host ? !def->run_host : !def->launch_cuda)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "op %s has no %s implementation in this build",
                      def->name, host ? "host" : "CUDA");

  if (def->is_random) {
    recap__philox_args philox;
    recap_status st = recap__rng_next(stream, &philox);
    if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", def->name);
    call->rng_seed = philox.seed;
    call->rng_offset = philox.offset;
    call->rng_slot = philox.slot;
    call->rng_slot_delta = philox.slot_delta;
  }

  recap_status st;
  if (host) {
    st = stream->backend->launch_kernel(stream, host_trampoline, call, sizeof *call);
  } else {
    /* The kernels launch on the current device, which must be the stream's: a process that
     * drives several GPUs (a rank that sees every GPU, a pipeline per device) has another one
     * current on this thread more often than not. */
    int previous = 0;
    const recap__backend *be = stream->backend;
    st = be->device_enter ? be->device_enter(stream->device.index, &previous) : RECAP_OK;
    if (st == RECAP_OK) {
      st = def->launch_cuda(call, recap_stream_native(stream));
      if (be->device_exit) be->device_exit(stream->device.index, previous);
    }
  }
  if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", def->name);
  return RECAP_OK;
}

recap_status recap__op_prepare(const recap__op_call *call, recap_stream *stream) {
  RECAP_CHECK_ARG(call && call->def && stream && stream->backend);
  if (!call->def->prepare) return RECAP_OK;
  recap_status st = call->def->prepare(call, stream);
  if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", call->def->name);
  return RECAP_OK;
}
