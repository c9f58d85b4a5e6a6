/*
 * cuda_ops.h: the CUDA entry points of the op library (internal to kernels/).
 *
 * Each op definition (kernels/<family>.c) points its `launch_cuda` slot at one of these; they
 * are implemented in kernels/<family>.cu (extern "C") and exist only in CUDA builds. Every
 * entry point has the signature of recap__op_def.launch_cuda:
 *
 *   recap_status fn(const recap__op_call *call, void *cuda_stream);
 *
 * The call has passed recap__op_infer (shapes, dtypes, attributes and the constraints below
 * are already checked) and its tensors' data pointers are bound to device memory. An entry
 * point launches on `cuda_stream` (a cudaStream_t; never the legacy default stream), never
 * allocates or synchronizes, and returns a status naming the op on a launch failure. Tensors
 * are recap_tensor views: element strides, row-major shapes, up to 4 dims. Outputs written by
 * these ops are contiguous (infer makes them so), except kv_append's, which is its cache.
 * The host reference for each is in kernels/host/<family>.c; the semantics there are the spec.
 *
 *   def.launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_softmax),   // NULL in host-only builds
 */
#ifndef RECAP_KERNELS_CUDA_OPS_H
#define RECAP_KERNELS_CUDA_OPS_H

#include "kernels/op.h"
#include "kernels/op_codes.h"
#include "kernels/view.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An op def's launch_cuda initializer: the entry point in CUDA builds, NULL otherwise (the
 * launcher then reports that the op has no CUDA implementation in this build). */
#if RECAP_WITH_CUDA
#define RECAP_CUDA_ENTRY(fn) (fn)
#else
#define RECAP_CUDA_ENTRY(fn) NULL
#endif

#if RECAP_WITH_CUDA

/* Unary elementwise, def->code is a recap__unary_code. inputs[0] any strides (f32/f16/bf16);
 * outputs[0] contiguous, same shape; same dtype except CAST (attrs.dtype, a float type).
 * SCALE: out = attrs.scale * x. GELU is the erf form, GELU_TANH the tanh approximation.
 * May run in place (output data == input data, both contiguous). */
recap_status recap__cuda_unary(const recap__op_call *call, void *cuda_stream);

/* Binary elementwise with numpy broadcasting, def->code is a recap__binary_code. inputs[0]
 * and inputs[1] have one float dtype and any strides; shapes are right-aligned and a
 * dimension of size 1 broadcasts. outputs[0] contiguous, the broadcast shape, same dtype.
 * May run in place on input 0 when its shape equals the output's and it is contiguous. */
recap_status recap__cuda_binary(const recap__op_call *call, void *cuda_stream);

/* Softmax over the last dimension of inputs[0] (last-dim stride 1; other dims any strides).
 * out = softmax(x * s) with s = attrs.scale, or 1 when attrs.scale == 0. attrs.causal: with
 * rows = shape[ndim-2] (1 for a 1-D input) and cols = shape[ndim-1], element (i, j) of each
 * [rows, cols] matrix is masked when j > i + (cols - rows); masked elements output 0, and a
 * row with every element masked outputs all 0. Accumulate in f32. */
recap_status recap__cuda_softmax(const recap__op_call *call, void *cuda_stream);

/* LayerNorm over the last dimension D: inputs x [..., D] (last-dim stride 1), weight [D],
 * bias [D] (optional: num_inputs == 2 means none), all one dtype, weight/bias contiguous.
 * out = (x - mean) / sqrt(var + attrs.eps) * weight + bias, var the biased (1/D) variance. */
recap_status recap__cuda_layernorm(const recap__op_call *call, void *cuda_stream);

/* RMSNorm over the last dimension D: inputs x [..., D] (last-dim stride 1), weight [D]
 * (contiguous), one dtype. out = x / sqrt(mean(x^2) + attrs.eps) * weight. */
recap_status recap__cuda_rmsnorm(const recap__op_call *call, void *cuda_stream);

/* all_reduce (sum, or average with attrs.causal) of inputs[0] into outputs[0] as one kernel
 * over the communicator's peer buffers (comm/peer_buffers.h), and with a norm weight
 * (num_outputs 2) the sum's RMSNorm into outputs[1]. *done false (nothing launched) when
 * there are no buffers (peers NULL), attrs.peer_buffers_off is set, the dtype is not a float or
 * the sum does not fit a slot: the caller then runs NCCL. Contiguous tensors, any alignment. */
struct recap__peer_view;
recap_status recap__cuda_all_reduce_oneshot(const recap__op_call *call,
                                            const struct recap__peer_view *peers, void *cuda_stream,
                                            bool *done);

/* Sum (def->code 0) or mean (def->code 1) over the last dimension of inputs[0] (last-dim
 * stride 1). outputs[0] drops the last dimension (a 1-D input gives shape [1]); same dtype. */
recap_status recap__cuda_reduce_last(const recap__op_call *call, void *cuda_stream);

/* reshape, permute, transpose, slice, split, copy. For each output o in
 * [0, call->num_outputs): build the source view with recap__view_for_copy(call, o, &view)
 * (kernels/view.h: host code, callable from a .cu launcher), then copy element k, in
 * row-major order over view.shape, to element k, in row-major order over
 * outputs[o].shape (contiguous). The element counts are equal; shapes may differ (reshape).
 * Any dtype (f32/f16/bf16/i32/i64): a copy of recap_dtype_size(dtype) bytes per element. */
recap_status recap__cuda_copy_strided(const recap__op_call *call, void *cuda_stream);

/* Concatenation of inputs[0..num_inputs) (one dtype, any strides, equal shapes except along
 * dim) along d = attrs.dim (already normalized to [0, ndim) by infer) into contiguous
 * outputs[0]. Any dtype. */
recap_status recap__cuda_concat(const recap__op_call *call, void *cuda_stream);

/* Fills contiguous outputs[0] with attrs.value converted to its dtype (any dtype; for
 * integer dtypes infer has checked that the value is an integer in range). */
recap_status recap__cuda_fill(const recap__op_call *call, void *cuda_stream);

/* Row gather: inputs[0] table [V, D] (float dtype, any strides), inputs[1] ids (i32 or i64,
 * any shape up to 3 dims, any strides). outputs[0] [ids..., D] contiguous, table's dtype:
 * out[n, :] = table[ids[n], :]. An id outside [0, V) is a device fault: the host reference
 * returns an error, which the host backend makes a sticky fault; the CUDA kernel must not
 * read out of bounds (trap, like a device-side assert, so the fault is sticky there too). */
recap_status recap__cuda_embedding(const recap__op_call *call, void *cuda_stream);

/* Rotary position embedding, rotate-half convention (Llama / PyTorch):
 * inputs[0] x [B, S, H, Dh] or [S, H, Dh] (float dtype, any strides, Dh even),
 * inputs[1] positions i32, contiguous, either [S] (position of sequence row s, shared by
 * the batch) or [1] when S > 1 (a start position read from device memory: row s has
 * position pos[0] + s; with S == 1 both forms agree). With half = Dh / 2, for i < half:
 *   inv_freq = theta ^ (-2 i / Dh) (Llama 3 scaled with attrs.rope_llama3), angle =
 *   position * inv_freq,
 *   out[i]        = x[i] * cos(angle) - x[i + half] * sin(angle)
 *   out[i + half] = x[i + half] * cos(angle) + x[i] * sin(angle)
 * cos and sin are recap__rope_cos_sin (kernels/rope.h), the host's own f32 steps, which
 * follow transformers; the rotation is computed in double from them and rounded once.
 * outputs[0] contiguous, x's shape and dtype. May run in place (each pair is read before
 * it is written). A negative position is a device fault (as embedding ids). */
recap_status recap__cuda_rope(const recap__op_call *call, void *cuda_stream);

/* KV-cache append: inputs[0] cache [B, Smax, H, Dh] (any strides), inputs[1] new rows
 * [B, T, H, Dh] (any strides, the cache's dtype, any float dtype), inputs[2] pos i32 [1]
 * in device memory, READ IN THE KERNEL (a captured graph replays with the position the
 * device holds at replay time). Writes cache[b, pos + t, h, :] = new[b, t, h, :] for
 * t < T. outputs[0] IS the cache: same descriptor, same data pointer (checked by the
 * launcher). pos < 0 or pos + T > Smax is a device fault (host: error status). */
recap_status recap__cuda_kv_append(const recap__op_call *call, void *cuda_stream);

/* Attention for a group of heads: inputs q [B, H, Sq, Dh], k [B, Hkv, Sk, Dh],
 * v [B, Hkv, Sk, Dh] (one float dtype; last-dim stride 1, other dims any strides;
 * H % Hkv == 0, query head h reads kv head h / (H / Hkv)), optional inputs[3] len i32 [1]
 * in device memory, READ IN THE KERNEL: keys 0..L-1 are valid, L = len (0 <= L <= Sk, else a
 * device fault), or L = Sk without it. scale = attrs.scale, or 1/sqrt(Dh) when 0.
 * out[b, h, i, :] = sum_j p_j v[b, h', j, :], p = softmax_j(q_i . k_j * scale) over the
 * visible keys: j < L, and with attrs.causal also j <= L - Sq + i (query i's absolute
 * position). A query that sees no key outputs 0. outputs[0] [B, H, Sq, Dh] contiguous,
 * q's dtype. Accumulate in f32. */
recap_status recap__cuda_attention(const recap__op_call *call, void *cuda_stream);

/* The paged serving ops (kernels/paged.c; inputs and outputs as their infer describes:
 * seqs i32 [Bs, W] contiguous, W = RECAP_SEQ_BLOCKS + MB; pools [NB, BS, Hkv, Dh] and q/new
 * with unit-stride last dims). Every kernel reads `seqs` when it runs, never the launcher, so
 * a captured graph serves any metadata; the grids depend on shapes only. A token that no row
 * owns writes nothing to state and outputs 0.
 *
 * Bad metadata on the GPU: a kernel never reads or writes out of bounds; it TRAPS (a sticky
 * device fault, as attention's bad len and embedding's bad id are, and as the host reference's
 * error is on the host backend) when a row it scans has Q_LEN < 0 or Q_LEN > LEN, tokens
 * outside [0, T) (Q_START < 0 or Q_START + Q_LEN > T, rows with Q_LEN > 0; seq_last_tokens has
 * no T and checks Q_START >= 0 only), LEN > MB * BS (ops with a pool), or when a block id it
 * needs (a position its token reads or writes) is outside [0, NB). What takes more than one
 * row to see is not checked on the GPU: rows that are not packed (a token two rows claim goes
 * to one of them, in bounds) and two tokens writing one cache row (they race). The host
 * reference checks all of it (kernels/host/seq_meta.h). */

/* seq_positions: outputs[0] i32 [T] (T = attrs.dim): token Q_START + t of a row gets
 * LEN - Q_LEN + t, tokens no row owns 0. */
recap_status recap__cuda_seq_positions(const recap__op_call *call, void *cuda_stream);

/* seq_last_tokens: outputs[0] i32 [Bs]: Q_START + Q_LEN - 1 for a row with tokens, else 0. */
recap_status recap__cuda_seq_last_tokens(const recap__op_call *call, void *cuda_stream);

/* paged_kv_write: inputs cache [NB, BS, Hkv, Dh] (any strides, last 1), new [T, Hkv, Dh] (the
 * cache's dtype, any strides, last 1), seqs. Token i = Q_START + t of a row, at position
 * p = LEN - Q_LEN + t, is copied to cache[seqs[row][RECAP_SEQ_BLOCKS + p / BS], p % BS].
 * outputs[0] IS the cache (same data pointer, checked). Bit-exact copy. */
recap_status recap__cuda_paged_kv_write(const recap__op_call *call, void *cuda_stream);

/* paged_rope_kv_write: inputs q [T, H, Dh], k and v [T, Hkv, Dh] (one float dtype, any strides,
 * last 1; Dh even), k_cache and v_cache [NB, BS, Hkv, Dh] (any strides, last 1), seqs. Token i of
 * a row at position p (as paged_kv_write; a token no row owns has p = 0) gets outputs[0][i, h] =
 * rope(q[i, h], p) for every head, and for a token a row owns k_cache's row p is rope(k[i], p)
 * and v_cache's v[i], where rope is recap__cuda_rope's rotation at attrs' theta and scaling
 * (recap__rope_cos_sin and recap__rope_rotate: bit for bit the host's). outputs[0] [T, H, Dh]
 * contiguous; outputs[1] and [2] ARE the caches (same data pointers, checked). Dh up to 256
 * (the pairs' inv_freqs travel with the launch), else NOT_SUPPORTED. */
recap_status recap__cuda_paged_rope_kv_write(const recap__op_call *call, void *cuda_stream);

/* paged_attention: inputs q [T, H, Dh] (any strides, last 1), k_cache and v_cache
 * [NB, BS, Hkv, Dh] (q's dtype), seqs; H % Hkv == 0, query head h reads KV head h / (H / Hkv).
 * Token i = Q_START + t of a row sits at p = LEN - Q_LEN + t and attends to its sequence's key
 * positions 0..p (causal), position j at row j % BS of block seqs[row][RECAP_SEQ_BLOCKS + j /
 * BS] of the pools: out[i, h] = sum_j softmax_j(q_i,h . k_j * scale) v_j, scale = attrs.scale
 * or 1/sqrt(Dh) when 0; accumulate in f32. outputs[0] [T, H, Dh] contiguous. When
 * recap__paged_attention_plan (kernels/paged.h) splits the keys, call->workspace must hold
 * recap__paged_attention_workspace bytes (else INVALID_ARGUMENT). CUDA takes Dh up to 256
 * that fills whole 16-byte vectors (a multiple of 8 elements for f16/bf16, of 4 for f32) and
 * pools whose rows are 16-byte aligned; other shapes are NOT_SUPPORTED. */
recap_status recap__cuda_paged_attention(const recap__op_call *call, void *cuda_stream);

/* paged_rope_attention: paged_rope_kv_write then paged_attention (above) over its inputs q, k,
 * v, k_cache, v_cache, seqs; outputs[0] the attention [T, H, Dh] contiguous, outputs[1] and [2]
 * ARE the caches (checked). call->workspace holds the rotated q first
 * (recap__paged_rope_attention_q_rot_bytes), then the attention's split partials, as
 * kernels/paged.h says. A step of at most one token per seqs row (recap__paged_rope_attention_
 * one_kernel) runs as one kernel when Dh / 2 fills whole 16-byte vectors: each CTA rotates its
 * q in registers, the CTA of split 0 and the first heads writes the token's K and V rows, and
 * the step's own keys are read from k and v (rotated as they are read), never from the pools
 * this launch writes; else the two kernels run, the rotated q through the workspace. Same bits
 * as the two ops for q, k and v rows; attention's sums may add in another order. */
recap_status recap__cuda_paged_rope_attention(const recap__op_call *call, void *cuda_stream);

/* argmax: inputs[0] x [R, V] (float dtype, unit-stride rows, any row stride), outputs[0] i32
 * [R]: for each row the index of its top-ranked element (kernels/sample.h): the largest value,
 * ties to the lowest index, -0 equal to +0, and NaN larger than any number (a row with NaNs
 * gives its first NaN's index). Exact: both backends give the same ids. Takes sample's
 * workspace and call state at few rows (below). */
recap_status recap__cuda_argmax(const recap__op_call *call, void *cuda_stream);

/* sample: inputs[0] logits [R, V] (float dtype, unit-stride rows), inputs[1] seqs i32 [R, W]
 * (W >= RECAP_SEQ_MIN_P + 1, unit-stride rows), READ IN THE KERNEL; outputs[0] tokens i32 [R],
 * and with attrs.logprobs outputs[1] f32 [R]. Row r of the logits belongs to row r of seqs
 * (recap__sample_params_read). Per row:
 * - Q_LEN == 0 (an unused slot): token -1, logprob 0; its other columns are not read.
 * - Invalid parameters (recap__sample_params_error: Q_LEN, OUT_INDEX or TOP_K < 0, TEMPERATURE
 *   < 0, infinite or NaN, TOP_P or MIN_P outside [0, 1] or NaN): a device fault (the host
 *   reference returns an error naming the row and the column; a CUDA kernel traps).
 * - A NaN logit: the token is the first NaN's index, whatever the parameters; logprob NaN.
 * - Greedy (TEMPERATURE 0 or TOP_K 1): argmax's token.
 * - Otherwise, with T = TEMPERATURE and m the largest logit, token i weighs
 *   e_i = exp((x_i - m) / T) (1 where x_i == m, so +inf logits share the mass and an all -inf
 *   row is uniform). The kept set is K, then P, then M, in the order of transformers' warpers:
 *   K: the TOP_K top-ranked tokens (all when TOP_K is 0 or >= V); P (0 < TOP_P < 1): the
 *   shortest run of K's tokens in rank order whose weight reaches TOP_P x the weight of K (at
 *   least one token); M (MIN_P > 0): tokens with x_i >= m + T ln(MIN_P), i.e. p_i >= MIN_P x
 *   max p. With u = recap__sample_u53(SEED, OUT_INDEX) / 2^53, the token is the lowest kept
 *   index whose running kept weight, in index order, exceeds u x the total kept weight.
 * - logprob: the raw log softmax at the token, (x_tok - m) - ln(sum_i exp(x_i - m)), whatever
 *   the temperature and filters (vLLM's default "raw" logprobs).
 * The host reference computes weights and sums in double. The CUDA kernel ranks and applies
 * K and M exactly as the host does (they compare logits); its weights are f32 exponentials
 * held as 64-bit fixed point, so P's crossing and the inverse CDF may pick a neighbouring
 * token where the host's sums come within ~1e-6 relative of a boundary: rare (tests count
 * such rows). One block per row, or at fewer than 64 rows of at least 8192 logits several per
 * row (recap__sample_slices), which need the op's workspace and zeroed call state (refused
 * without); rows of at most 2^30 logits. */
recap_status recap__cuda_sample(const recap__op_call *call, void *cuda_stream);

/* random_uniform (def->code 0) / random_normal (def->code 1) into contiguous outputs[0]
 * (float dtype). The Philox parameters are call->rng_seed/rng_offset, or, when
 * call->rng_slot != NULL (a capture), the slot read IN THE KERNEL:
 *   recap__philox_args a = {call->rng_seed, call->rng_offset, call->rng_slot,
 *                           call->rng_slot_delta};  // then recap__philox_resolve in-kernel
 * Element i: w = recap__philox_draw(seed, offset, i / 4);
 *   uniform: recap__philox_uniform(w.v[i % 4], (float)attrs.low, (float)attrs.high)
 *   normal:  recap__philox_normal4(w, (float)attrs.mean, (float)attrs.std, out4)[i % 4]
 * then rounded to the output dtype (runtime/philox.h). */
recap_status recap__cuda_random(const recap__op_call *call, void *cuda_stream);

/* decode_advance (kernels/decode_advance.c): inputs ids [T], seqs [Bs, W] (W >
 * RECAP_SEQ_BLOCKS, row stride any, columns contiguous), tokens [Bs], all i32; output 0 is
 * ids. attrs.start is the KV block size. Rows with Q_LEN > 0 in order: one whose next
 * position LEN has no block (column LEN / block size past the table or below 0) gets Q_LEN 0
 * and Q_START 0; the others get Q_START = their rank among such rows, Q_LEN 1, LEN + 1,
 * OUT_INDEX + 1, and ids[rank] = tokens[row]. A row with tokens and a negative token or LEN
 * traps. */
recap_status recap__cuda_decode_advance(const recap__op_call *call, void *cuda_stream);

/* matmul and linear: implemented by the GEMM half (kernels/gemm/choose.c); see
 * kernels/gemm/gemm.h. */
recap_status recap__cuda_gemm(const recap__op_call *call, void *cuda_stream);

#endif /* RECAP_WITH_CUDA */

#ifdef __cplusplus
}
#endif

#endif
