/*
 * op.h: the op library's contract (internal to recap; the engine and `recap ops` read it).
 *
 * Each op is a recap__op_def in the registry (registry.c): its inputs and attributes, shape
 * and dtype inference (host-only code, usable without CUDA), whether its output may alias an
 * input (in-place), its workspace size, and one launch function per backend. Launchers never
 * allocate, synchronize or touch the legacy default stream, so every op is capturable.
 *
 *   const recap__op_def *def = recap__op_find("softmax");
 *   recap__op_call call = {.def = def, .num_inputs = 1, .num_outputs = 1};
 *   call.inputs[0] = x_desc;                       // shapes/dtypes; data may still be NULL
 *   call.attrs.scale = 0.125; call.attrs.causal = 1;
 *   RECAP_TRY(recap__op_infer(&call));            // fills call.outputs[*] shapes/dtypes
 *   ... bind call.inputs[i].data / call.outputs[i].data to device memory ...
 *   RECAP_TRY(recap__op_launch(&call, stream));    // host or CUDA by the stream's backend
 *
 * recap__op_call is plain data of fixed size: the host backend copies it into a captured
 * graph node, exactly as CUDA copies kernel parameters.
 */
#ifndef RECAP_KERNELS_OP_H
#define RECAP_KERNELS_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RECAP_OP_MAX_INPUTS = 8, RECAP_OP_MAX_OUTPUTS = 4 };

/* Activations fused into GEMM epilogues and available as unary ops. */
typedef enum {
  RECAP_ACT_NONE = 0,
  RECAP_ACT_RELU,
  RECAP_ACT_GELU,      /* erf form: x * 0.5 * (1 + erf(x / sqrt(2))), PyTorch's default */
  RECAP_ACT_GELU_TANH, /* tanh approximation, cuBLASLt's GELU epilogue */
  RECAP_ACT_SILU,
  RECAP_ACT_SIGMOID,
  RECAP_ACT_TANH,
} recap__activation;

/* Every attribute any op takes; each op reads the ones its definition lists. Plain data. */
typedef struct {
  double alpha, beta;    /* matmul: out = alpha * op(a) op(b) + beta * out */
  double eps;            /* layernorm, rmsnorm */
  double scale;          /* softmax/attention scale (0 = none given), unary `scale` factor */
  double value;          /* fill */
  double mean, std;      /* random normal */
  double low, high;      /* random uniform */
  recap__activation act; /* linear epilogue; unary activation op */
  int residual;          /* linear: its last input is the residual (implied by all four) */
  /* linear prologues (kernels/gemm/gemm.h), each a folded op the linear computes on x's load:
   * rms_norm: x is normalized as rmsnorm does (eps above), its last input is the norm's
   * weight; glu (an activation, NONE: off): x is [..., 2K] and the product reads
   * glu(x[..., :K]) * x[..., K:]. */
  int rms_norm;
  recap__activation glu;
  /* linear's gated output (an activation, NONE: off; kernels/gemm/gemm.h): the weight's rows
   * are gate then up halves, and out[..., j] = gated(gate_j) * up_j, half the rows wide. */
  recap__activation gated;
  int causal;   /* softmax/attention mask */
  int logprobs; /* sample: also output the chosen tokens' log probabilities */
  /* all_reduce: set by the engine when another all_reduce of the pipeline may run at the same
   * time (on another stream), so this one must not use the communicator's peer buffers, which
   * hold one call at a time (comm/peer_buffers.h). */
  int peer_buffers_off;
  int trans_a, trans_b;          /* matmul */
  int64_t dim;                   /* split/concat/slice axis */
  int64_t start, end;            /* slice bounds */
  int64_t sizes[RECAP_MAX_DIMS]; /* reshape target / permute order / split sizes */
  int num_sizes;
  recap_dtype dtype; /* cast target / output dtype override */
  /* rope (kernels/rope.h): theta as the older integer `base` or the float `theta` (0: not
   * given), and Llama 3 frequency scaling with its four parameters (0: not given). */
  int64_t rope_base;
  double rope_theta;
  int rope_llama3;
  double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int64_t rope_original_max;
  /* expr (and fused elementwise chains): the compiled expression, kernels/expr.h. Owned by
   * whoever built it (the spec, or the pipeline's fusion pass) and immutable, so graph copies
   * of a call share the pointer. */
  const struct recap__expr_program *expr;
} recap__op_attrs;

/* How a copy-family op's source view is made from input 0 (recap__view_for_copy). */
typedef enum {
  RECAP__COPY_NONE = 0,   /* not a copy-family op */
  RECAP__COPY_RESHAPE,    /* the input as it is, under the output's shape */
  RECAP__COPY_PERMUTE,    /* dims reordered by attrs.sizes */
  RECAP__COPY_TRANSPOSE,  /* dims attrs.sizes[0] and [1] swapped */
  RECAP__COPY_SLICE,      /* [attrs.start, attrs.end) of attrs.dim */
  RECAP__COPY_SPLIT,      /* output o's part of attrs.dim (attrs.sizes) */
  RECAP__COPY_CONTIGUOUS, /* the input as it is: an explicit copy, never planned as a view */
} recap__copy_view;

/* How the fusion pass may write an elementwise op into one generated kernel (kernels/expr.h):
 * as the expression language's unary or binary function of the def's `code` (op_codes.h), or
 * as the op's own program (attrs.expr). */
typedef enum {
  RECAP__FUSE_NONE = 0, /* never fused */
  RECAP__FUSE_UNARY,
  RECAP__FUSE_BINARY,
  RECAP__FUSE_PROGRAM,
} recap__fuse_form;

/* Which op a linear may compute in its prologue instead of it running as a kernel of its own
 * (engine/fuse.h, "Prologues"; kernels/gemm/gemm.h): RMS_NORM an op of inputs (x, weight) and
 * attribute eps computing x * rsqrt(mean(x^2) + eps) * weight over the last dim, as rmsnorm. */
typedef enum {
  RECAP__PROLOGUE_NONE = 0,
  RECAP__PROLOGUE_RMS_NORM,
} recap__prologue_form;

typedef struct recap__op_def recap__op_def;

/* One invocation: inputs, outputs, attributes, workspace. The launch functions receive it
 * by pointer; the host backend copies it by value into graphs. */
typedef struct {
  const recap__op_def *def;
  int num_inputs, num_outputs;
  recap_tensor inputs[RECAP_OP_MAX_INPUTS];
  recap_tensor outputs[RECAP_OP_MAX_OUTPUTS];
  recap__op_attrs attrs;
  void *workspace;
  size_t workspace_bytes;
  /* Device memory of this call alone (call_state_bytes), zeroed when the pipeline binds and
   * kept from one launch to the next; NULL when the op asks for none. */
  void *call_state;
  size_t call_state_bytes;
  /* Philox parameters for random ops, filled by recap__op_launch from the runtime. */
  uint64_t rng_seed, rng_offset;
  const uint64_t *rng_slot; /* device {seed, offset} during a capture, else NULL */
  uint64_t rng_slot_delta;
} recap__op_call;

/* What an attribute's offset points at in recap__op_attrs: FLOAT a double, INT an int64_t,
 * BOOL an int, INT_LIST the `sizes` array (its length goes to num_sizes), ACTIVATION a
 * recap__activation, DTYPE a recap_dtype, EXPR the `expr` pointer (the spec gives a string,
 * parsed over the op's input names; kernels/expr.h). */
typedef enum {
  RECAP_ATTR_FLOAT,
  RECAP_ATTR_INT,
  RECAP_ATTR_BOOL,
  RECAP_ATTR_INT_LIST,
  RECAP_ATTR_ACTIVATION,
  RECAP_ATTR_DTYPE,
  RECAP_ATTR_EXPR,
} recap__attr_kind;

/* Describes one attribute for the spec parser and `recap ops`: name as written in a spec,
 * its kind, where it lands in recap__op_attrs (offsetof), whether required, default, doc. */
typedef struct {
  const char *name;
  recap__attr_kind kind;
  size_t offset;
  bool required;
  double default_value;
  const char *doc;
} recap__attr_def;

struct recap__op_def {
  const char *name;
  const char *summary;
  int code; /* which member of a family (e.g. which unary function) the shared launcher runs */
  const char *const *input_names; /* NULL-terminated; an entry ending in '?' is optional */
  int min_inputs, max_inputs;
  /* Outputs the op produces; for ops with a variable count (split) the most it produces, and
   * infer sets call->num_outputs. */
  int num_outputs;
  const recap__attr_def *attrs; /* terminated by an entry with name == NULL */
  /* Supported element types (1u << dtype) of the main input: inputs[0], or attrs.dtype for
   * ops without inputs (fill, random). */
  unsigned dtype_mask;
  /* The output index's shape/dtype may alias input `in_place_input` (-1: never). */
  int in_place_input;
  bool is_random; /* draws from the device's Philox generator */
  /* A copy-family op: its output is a strided copy of a view of input 0 (view.h), made as this
   * says, which the planner may turn into a real view that copies nothing. NONE for the rest. */
  recap__copy_view copy_view;
  /* Outputs that ARE inputs' memory: output o is input output_is_input[o] (-1: an output of
   * its own), one entry per output; NULL: none is. The op writes into those inputs and returns
   * them (kv_append's cache, paged_rope_kv_write's two pools). Unlike in_place_input, which the
   * planner may take or not, this aliasing is the op's meaning: such an output is never planned
   * a buffer of its own, and the op has done its work even when nothing reads it. Read it
   * through recap__op_output_input. */
  const int *output_is_input;
  /* Its last input (max_inputs - 1, optional) is the run's real row count, an i32 device
   * scalar that the engine binds itself when the spec leaves it out, so that a bucket's padding
   * rows never reach state (kv_append's `rows`). */
  bool takes_rows;
  /* With every input zero (an all-zero `seqs`: no sequence owns a token) the op writes nothing
   * to state, so warmup runs on zeroed inputs need no backup of the state it writes (a KV pool
   * can be most of the device's memory). */
  bool zero_meta_writes_nothing;
  /* Every backend writes output 0 through the strides it is given, any layout whose last dim
   * has stride 1 (or size 1), not only the contiguous one infer describes. The planner then
   * lets the op write straight into the layout a following permute, transpose or reshape
   * wants, so that shape op copies nothing (docs/PLANNER.md, backward views). Set it only when
   * the host reference and the CUDA kernel both honour output strides. */
  bool strided_output;
  /* Elementwise and fusable, and how (engine/fuse.h). */
  recap__fuse_form fuse_form;
  /* An `add` of output 0 and a tensor of its shape may run in the op's epilogue instead
   * (out = op(...) + residual: linear's accumulate into C). The fusion pass appends that tensor
   * as the op's last input and sets attrs.residual, which tells the op that the last input is
   * the residual whichever optional inputs come before it (a linear without a bias). */
  bool folds_residual;
  /* This op may be folded into a linear's prologue as the form says (NONE: never). */
  recap__prologue_form prologue_form;
  /* Whether this op computes act(input gate) * input up elementwise, of equal shapes and no
   * broadcast (a gated linear unit: SwiGLU's silu(gate) * up), and which act and inputs
   * (optional; NULL: never). The fusion pass then folds it into the linears that read it as
   * their `glu` prologue when gate and up are the two halves of one tensor. */
  bool (*as_glu)(const recap__op_attrs *attrs, int num_inputs, recap__activation *act, int *gate,
                 int *up);
  /* A linear: takes the rms_norm and glu prologues (attrs.rms_norm, attrs.glu). */
  bool takes_prologue;
  /* A linear: may compute an as_glu op on the two halves of its own output, split by the last
   * dim, as its output (attrs.gated; engine/fuse.h, "Gated outputs"). */
  bool takes_gated_output;
  /* The op may also compute an op of prologue_form RMS_NORM that reads its output 0, as its
   * output 1: the norm's weight as its last input (max_inputs - 1), attrs.eps its epsilon
   * (engine/fuse.h, "Norm epilogues"). all_reduce: every rank holds the whole sum, so the norm
   * runs inside the collective's own kernel. */
  bool takes_norm_epilogue;
  /* An op that is other ops run in order over its tensors (paged_rope_attention is
   * paged_rope_kv_write then paged_attention): their defs, NULL-terminated, which its backends
   * take through the call to run them where they do not run it as one kernel (NULL: none). */
  const recap__op_def *const *parts;
  /* Its CUDA launch may use its communicator's peer buffers, which hold one call at a time
   * (comm/peer_buffers.h): when a pipeline has ops of this kind on more than one stream, the
   * engine sets attrs.peer_buffers_off on all of them (engine/load.c). */
  bool one_call_per_communicator;
  /* The (input, axis) pairs the op reduces or contracts over, at most 4 (axes < 0 count from
   * the end); returns how many. NULL: none. The loader refuses such an axis that carries the
   * bucketed dim: a bucket's padding rows would change the result. */
  int (*reduced_axes)(const recap__op_attrs *attrs, int input[4], int axis[4]);
  /* Floating-point operations of one call at its shapes, for work estimates (NULL: one per
   * element of the larger of input 0 and output 0, as elementwise ops and reductions). */
  double (*flops)(const recap__op_call *call);
  /* Validates inputs and attributes and fills outputs' dtype/ndim/shape/strides (contiguous).
   * Errors name the op and the offending input or attribute. Host-only code. */
  recap_status (*infer)(recap__op_call *call);
  /* Workspace bytes for the bound shapes on a backend (optional; NULL means 0). The
   * workspace is shared with the other ops of the call's stream: it holds nothing from one
   * launch to the next. */
  size_t (*workspace_bytes)(const recap__op_call *call, recap_backend_kind backend);
  /* Bytes of call_state for the bound shapes on a backend (optional; NULL means 0): memory
   * no other call touches, zero at the first launch. A launch that completes leaves it zero
   * again (arrival counters that the last arriving block resets, say), so every launch
   * finds it zero, in a graph or not. */
  size_t (*call_state_bytes)(const recap__op_call *call, recap_backend_kind backend);
  /* The host reference implementation: computes in float (f64 for sums where it matters). */
  recap_status (*run_host)(const recap__op_call *call);
  /* The CUDA implementation: launches on `stream` (a cudaStream_t), never synchronizes.
   * NULL in host-only builds. */
  recap_status (*launch_cuda)(const recap__op_call *call, void *cuda_stream);
  /* First-time work for the call on `stream` (optional; NULL means none), run once per call
   * at warmup, before anything is captured: what the first launch would otherwise do lazily
   * and a capture must not see (GEMMs create handles and a workspace and choose their
   * algorithm, which may synchronize). Inside a capture it succeeds only when nothing is left
   * to do, else RECAP_STATUS_ILLEGAL_DURING_CAPTURE, never invalidating the capture. */
  recap_status (*prepare)(const recap__op_call *call, recap_stream *stream);
};

/* The input that output o of `def` is (output_is_input), or -1 for an output of its own. */
static inline int recap__op_output_input(const recap__op_def *def, int o) {
  return def->output_is_input ? def->output_is_input[o] : -1;
}

/* Looks an op up by name; NULL (with a message listing close names) if unknown. */
const recap__op_def *recap__op_find(const char *name);
/* All ops, in registry order; *count receives the number. */
const recap__op_def *const *recap__op_list(size_t *count);

/* Writes the default_value of every attribute of `def` that is not required (and not an
 * INT_LIST, which has no default) into *attrs. Callers that build a call by hand start from
 * this, as the spec parser does, so an unset optional attribute means its default. */
void recap__op_attrs_set_defaults(const recap__op_def *def, recap__op_attrs *attrs);

/* Checks counts and the dtype mask, then calls def->infer. */
recap_status recap__op_infer(recap__op_call *call);
/* Runs the op on `stream`'s backend: on host through the backend's launch_kernel (so captures
 * record it), on CUDA through def->launch_cuda. Random ops get their Philox parameters here. */
recap_status recap__op_launch(recap__op_call *call, recap_stream *stream);
/* Runs def->prepare for the call on `stream` (RECAP_OK when the op has none); errors name the
 * op. The engine calls it for every launched call during warmup, before capturing. */
recap_status recap__op_prepare(const recap__op_call *call, recap_stream *stream);

/* Helpers shared by ops. */
int64_t recap__tensor_numel(const recap_tensor *t);
bool recap__tensor_is_contiguous(const recap_tensor *t);
/* Sets contiguous row-major strides from the shape. */
void recap__tensor_set_contiguous(recap_tensor *t);
/* Element count with overflow check (shape entries must be >= 1, product < 2^62). */
recap_status recap__tensor_checked_numel(const recap_tensor *t, int64_t *out);

#ifdef __cplusplus
}
#endif

#endif
