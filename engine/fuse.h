/*
 * fuse.h: the fusion pass (internal to the engine): groups of elementwise ops become one
 * generated kernel, an `expr` op whose program (kernels/expr.h) computes the whole group.
 *
 * It runs on each bucket's IR after checking and before planning (pipeline.c, `recap plan`),
 * and rewrites the IR in place:
 *
 *   recap__ir *ir;  recap__ir_build(spec, bucket, 0, &ir, &diag);
 *   if (recap__fuse_enabled(options.no_fusion)) RECAP_TRY(recap__fuse(ir));
 *   recap__plan_build(ir, &plan);
 *
 * What fuses. The elementwise ops, those whose op contract has a fuse_form (kernels/op.h: today
 * relu gelu gelu_tanh silu sigmoid tanh exp neg scale cast, add sub mul div with broadcasting,
 * and `expr` ops), form a group through their intermediate tensors: op u's output is swallowed
 * into its consumer v's group when
 *   - the output is an intermediate (not a pipeline output, input, param, state or scalar, and
 *     not an alias) read by exactly one input slot, v's;
 *   - u and v run on the same stream;
 *   - the group stays within the limits of one kernel: RECAP_OP_MAX_INPUTS distinct external
 *     inputs, RECAP_EXPR_MAX_NODES nodes and RECAP_EXPR_MAX_DEPTH levels (kernels/expr.h).
 *     Groups grow in op order, each op taking its producers' groups slot by slot while the
 *     limits allow; a producer group that does not fit stays a group of its own (the cut).
 * A group is a tree of ops whose root (its last op) produces the group's output; its external
 * inputs are every tensor its members read that no member produces. Never fused: random ops,
 * ops with several outputs, views and every other op kind, and any op that reads memory some
 * op writes through an alias (a KV cache kv_append appends to): the fused op reads its inputs
 * at the root's place in the op order, which must not move a read past such a write.
 *
 * Tails of GEMMs and norms. A norm, and a GEMM without a usable epilogue, simply feed a group
 * (the group starts at their consumer). In addition, a linear whose activation cuBLASLt has no
 * epilogue for (gelu in its erf form, silu, sigmoid, tanh: kernels/gemm/epilogue.cu applies
 * those in a second pass over the output) and whose output's one consumer is fusable hands
 * the activation to that consumer's group: the linear keeps its bias epilogue, and the
 * activation becomes the first node of the fused kernel, saving the second pass. The
 * numerics do not change: the GEMM's output was stored in its dtype before the activation in
 * both cases.
 *
 * Numerics. The fused kernel loads each input as f32, computes every node in f32 and rounds
 * only the group's output to its dtype. Intermediates are NOT rounded to their declared dtype
 * (as torch.compile/inductor, whose default keeps fused intermediates in f32): for f32
 * pipelines nothing changes (the unfused ops compute in f32 too), for f16/bf16 the fused
 * result is the more accurate one and differs from the unfused pipeline by at most the
 * intermediate roundings it skips (a few ulp of the storage type over a chain). An explicit
 * `cast` op inside a group still rounds (RECAP_EXPR_CAST): a cast is the spec asking for that
 * precision.
 *
 * Residual adds. An `add` of a linear's output and another tensor (a skip connection) folds
 * into the linear (an op whose contract says folds_residual) as its residual input
 * (kernels/gemm/gemm.h: out = x W^T + bias + residual, which cuBLASLt computes as D = A B + C +
 * bias with beta = 1, so the add costs no pass of its own) when
 *   - the linear has no residual yet and no activation (cuBLASLt adds C before its
 *     activation; a linear with an erf-gelu etc. hands that to its consumer's group instead,
 *     above). A bias is optional: the folded linear's inputs are (x, W, bias, residual) or
 *     (x, W, residual), and attrs.residual marks the last one as the residual (Llama, Mistral
 *     and Qwen projections have no bias);
 *   - its output is an intermediate read by the add alone (not an output, not an alias);
 *   - the other operand has the same shape (no broadcast; the bucketed dim on the same axes,
 *     so every bucket folds alike) and dtype as the output and the add's result;
 *   - the linear and the add run on the same stream, and neither the linear's inputs nor the
 *     other operand are memory written through an alias (the folded linear runs at the add's
 *     place, later than the linear did).
 * The add is then no group member. The folded op is a `linear` named
 * "fused[<linear>,<add>]" with fused_from listing both spec ops, at the add's place, writing
 * the add's output. Numerics: one rounding of x W^T + bias + residual instead of two (the
 * linear's output was rounded to its dtype before the add): within the storage type's
 * tolerance, as for groups. Every CUDA path runs the fold as one launch: cuBLASLt (C, beta =
 * 1), the skinny kernel of decode shapes and the Hopper kernel (their epilogues); only plain
 * cuBLAS (recap_gemm_library) still adds it in a pass after the GEMM.
 *
 * Prologues (only with RECAP_FUSION_PROLOGUES=1: measured slower than the ops apart on the
 * H100 and the H200 but for one shape, docs/SERVING.md "Prologue folds"; the gated unit on the
 * host backend only, since CUDA refuses a linear with `glu`). A norm or a gated unit whose
 * output is x of linears folds into every one of them (kernels/gemm/gemm.h, "Prologues": the linear computes it as it loads x, so the op costs
 * no launch of its own; the skinny kernel of decode shapes does it in place, every other path
 * through the op's workspace, one launch as before). By the contract, never by name:
 *   - an op whose prologue_form is RMS_NORM (rmsnorm: inputs x and weight, attribute eps): each
 *     reader gets x in its place, the norm's weight as its last input (after any residual) and
 *     attributes rms_norm and eps;
 *   - an op whose as_glu says it computes act(gate) * up (an `expr` "silu(gate) * up", as the
 *     importer writes SwiGLU) where gate and up are the two halves of the last dim of one split
 *     (copy_view SPLIT, two equal outputs, gate first) read by that op alone: each reader gets
 *     the split's input, [..., 2K], as x and attribute glu = act; the split goes too. This form
 *     (one tensor holding gate|up, no second input) is what a fused gate_up projection
 *     produces, keeps one row stride for both halves and leaves the linear's input list alone;
 *     two separately computed gate and up tensors are not folded.
 * Legal only when every reader can take it: the output is an intermediate (not an output,
 * input, param, state or alias) read by at least one op, each reader a linear (takes_prologue)
 * with no prologue yet and a free input slot, reading it as x and in no other slot, on the same
 * stream; and nothing it reads is memory written through an alias (the linear reads it later).
 * Several linears may each fold the same norm (q, k and v projections); a norm that something
 * else reads (Qwen3's q/k norms, read by RoPE) stays. These folds are decided first, so the
 * ops they remove join no group; a linear may also fold its residual add afterwards. Numerics:
 * the norm's output is rounded to the dtype as before; the skinny kernel rounds x * weight
 * instead and applies rsqrt(mean + eps) to the f32 product, within the storage type's
 * tolerance.
 *
 * Gated outputs (on by default; RECAP_FUSION_GATED=0 turns them off). An op whose as_glu says
 * it computes act(gate) * up, where gate and up are the two halves of the last dim of one split
 * (as for the prologue) whose input is the output of a linear that takes_gated_output, read by
 * that split alone, becomes that linear's output: the linear gets attribute gated = act, the
 * unit's output as its own, and the split and the unit go (its input z and the halves with
 * them). The linear keeps its place and inputs (x, its [2F, K] weight, an optional bias, and
 * the norm's weight when it folds a norm); it must have no act, residual or gated-unit
 * prologue (a unit that a down projection folds into its prologue, decided first, is gone
 * already). A gate_up that folds the post-attention norm into its prologue takes its unit
 * too: one launch for the norm, the projection and the unit.
 * The unit's output is produced earlier than before, so it must be a plain tensor: no alias,
 * nothing written through one, the halves' shape and dtype. Its readers are not restricted.
 * Only SwiGLU's gate_up projection has this form in the importer's specs (cli/hf_spec.c), one
 * per layer: the decode GEMM pairs each gate row with its up row in its epilogue, one launch
 * fewer per layer (kernels/gemm/gemm.h, "Gated output"). Numerics: the product's halves are
 * rounded to the dtype before the unit, as the unfolded linear's output was; the unit's
 * activation is the GEMM's (recap__gemm_activate) instead of the expr kernel's, within the
 * storage type's tolerance.
 *
 * Norm epilogues. An op whose prologue_form is RMS_NORM (rmsnorm) reading output 0 of an op
 * that takes_norm_epilogue (all_reduce: every rank holds the whole sum) becomes that op's
 * second output: the op gets the norm's weight as its last input and its eps, and the norm
 * goes. The norm then runs at the op's place, earlier than it did, so: same stream, the weight
 * declared or produced before the op, nothing either reads written through an alias, no
 * alias among the tensors, one dtype. The norm's output keeps its tensor. On CUDA the one-shot
 * all_reduce normalizes each row in its own kernel (kernels/collective.cu), one launch fewer
 * per norm; where the sum goes through NCCL the norm's own kernel follows it, as before. A
 * norm that linears fold into their prologues (decided first) stays theirs. Numerics: the
 * norm reads the sum rounded to its dtype, as before; the one-shot kernel's sum of squares
 * adds in another order than the rmsnorm kernel's, within the storage type's tolerance.
 *
 * A group is rewritten only when it saves a launch: at least two ops, or one op and a moved
 * activation. The rewritten IR keeps every declared tensor at its index (they precede the op
 * outputs in the IR; only swallowed intermediates are removed), so random initializations,
 * keyed by tensor index, are the same with and without fusion. Every bucket's IR of a spec gets
 * the same groups (they depend on the DAG, roles, streams and dtypes, never on sizes).
 *
 * The fused op is named "fused[<members>]" (each member by its spec `name:`, else its kind),
 * for NVTX ranges and messages; recap__ir_op.fused_from lists the spec ops it replaces.
 * `recap plan` prints every kind (cli_fuse_format, cli/plan_text.h): a fold as
 * "= linear(x, w, b) + r", or "= linear(x, w) + r" without a bias, a prologue as
 * "linear(rms_norm(x, g), w)" or "linear(glu(gate_up), w)", a norm epilogue as
 * "all_reduce(x), and rms_norm(h, g) of it as its second output", a gated output as
 * "silu(g) * u of [g | u] = linear(x, w)".
 *
 * Switch: on by default; RECAP_FUSION=0 in the environment, or recap_pipeline_options.no_fusion
 * (the CLI's --no-fusion), turns it off (groups, residual folds, prologues, gated outputs and
 * norm epilogues alike).
 */
#ifndef RECAP_ENGINE_FUSE_H
#define RECAP_ENGINE_FUSE_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/ir.h"
#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One group found in an IR (indices into that IR). */
typedef struct {
  int root; /* the last op; its output is the group's output */
  int *ops; /* members in ascending order (root last) */
  int num_ops;
  int inputs[RECAP_OP_MAX_INPUTS]; /* external input tensors, in the program's input order */
  int num_inputs;
  int num_acts; /* linear activations moved into the group */
} recap__fuse_group;

typedef struct {
  recap__fuse_group *groups; /* in ascending order of root */
  size_t count;
} recap__fuse_groups;

/* Whether the pass runs: false when `option_off` (recap_pipeline_options.no_fusion, --no-fusion)
 * or when the environment has RECAP_FUSION=0; true otherwise. */
bool recap__fuse_enabled(bool option_off);
/* The same for a pipeline on `backend`: on CUDA the fused kernels are compiled at run time, so
 * the pass also needs NVRTC (runtime/nvrtc.h); when it cannot be loaded, fusion is off and one
 * line on stderr says why (the pipeline still runs, op by op). */
bool recap__fuse_enabled_on(bool option_off, recap_backend_kind backend);

/* The groups the pass would rewrite in `ir` (an IR fresh from recap__ir_build), without
 * changing it (residual folds are not groups; recap__fuse applies them as well). *out owns
 * its arrays (recap__fuse_groups_free). OUT_OF_MEMORY, or INVALID_ARGUMENT for an IR that
 * breaks ir.h's contract; *out is then empty. */
recap_status recap__fuse_find(const recap__ir *ir, recap__fuse_groups *out);
void recap__fuse_groups_free(recap__fuse_groups *groups);

/* Rewrites `ir` in place: each group becomes one `expr` op at its root's place, owning its
 * program, and each residual fold one `linear` at its add's place; swallowed intermediates are
 * removed and every index renumbered; ir->fused_ops counts the ops replaced. An IR with
 * nothing to fuse is left as it is. On failure (OUT_OF_MEMORY; INTERNAL if a built program's
 * inferred output disagrees with the group's: a bug) the IR is unchanged. */
recap_status recap__fuse(recap__ir *ir);

/* The expression a fused `expr` op of `ir` computes, its inputs named by their tensors, fully
 * parenthesized: "relu((x + b))". *text is the caller's to free(). INVALID_ARGUMENT for an op
 * with no program (a residual fold or an unfused op), OUT_OF_MEMORY. For `recap plan`. */
recap_status recap__fuse_expression_text(const recap__ir *ir, const recap__ir_op *op, char **text);

#ifdef __cplusplus
}
#endif

#endif
