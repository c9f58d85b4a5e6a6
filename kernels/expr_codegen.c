/*
 * expr_codegen.c: CUDA C++ source for an expression program and a dtype signature.
 *
 * The source is generated from the AST alone: node kinds become fixed snippets, inputs are
 * x0..x7, nodes are v0..vN, constants are written as their f32 bit patterns (exact, and never
 * text taken from a spec), so nothing a spec author writes can reach the compiler, and the
 * same program and signature always produce the same bytes (which is what the disk cache's
 * key relies on). It needs no headers (NVRTC then needs no include path): f16 and bf16 are
 * handled as 16-bit integers with PTX conversions (f16) and the integer round-to-nearest-even
 * of runtime/half.h (bf16), so host and device round identically.
 *
 * Two kernels per source, sharing one element function:
 *   recap_expr_strided  grid-stride loop; each element's 4-D index is decomposed once and
 *                       applied to every input's broadcast strides and the output's;
 *   recap_expr_dense    inputs and output contiguous, same shape, 16-byte aligned: each
 *                       thread handles RECAP_EXPR_VEC consecutive elements with vector loads.
 * Both start with the programmatic-dependent-launch preamble of kernels/cuda_common.cuh, so
 * the launcher may launch them as PDL kernels like the library's own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expr_impl.h"
#include "runtime/error.h"
#include "runtime/text.h"

static const char *type_of(recap_dtype d) {
  return d == RECAP_DTYPE_F32 ? "float" : "recap_u16";
}

static const char *suffix_of(recap_dtype d) {
  return d == RECAP_DTYPE_F32 ? "f32" : d == RECAP_DTYPE_F16 ? "f16" : "bf16";
}

static uint32_t f32_bits(double v) {
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* Fixed support code: conversions, the library's unary functions in f32 (the same formulas as
 * kernels/elementwise.cu), and the PDL preamble. */
static const char prelude[] =
    "typedef unsigned short recap_u16;\n"
    "\n"
    "__device__ __forceinline__ void recap_pdl_begin() {\n"
    "#if __CUDA_ARCH__ >= 900\n"
    "  asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");\n"
    "  asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");\n"
    "#endif\n"
    "}\n"
    "\n"
    "__device__ __forceinline__ float recap_from_f32(float v) { return v; }\n"
    "__device__ __forceinline__ float recap_from_f16(recap_u16 h) {\n"
    "  float f;\n"
    "  asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));\n"
    "  return f;\n"
    "}\n"
    "__device__ __forceinline__ float recap_from_bf16(recap_u16 h) {\n"
    "  return __uint_as_float((unsigned)h << 16);\n"
    "}\n"
    "__device__ __forceinline__ float recap_to_f32(float v) { return v; }\n"
    "__device__ __forceinline__ recap_u16 recap_to_f16(float v) {\n"
    "  recap_u16 h;\n"
    "  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(v));\n"
    "  return h;\n"
    "}\n"
    "__device__ __forceinline__ recap_u16 recap_to_bf16(float v) {\n"
    "  unsigned u = __float_as_uint(v);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u) return (recap_u16)((u >> 16) | 0x0040u);\n"
    "  u += 0x7fffu + ((u >> 16) & 1u);\n"
    "  return (recap_u16)(u >> 16);\n"
    "}\n"
    "\n"
    "__device__ __forceinline__ float recap_relu(float x) { return x > 0.0f ? x : 0.0f; }\n"
    "__device__ __forceinline__ float recap_gelu(float x) {\n"
    "  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));\n"
    "}\n"
    "__device__ __forceinline__ float recap_gelu_tanh(float x) {\n"
    "  const float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);\n"
    "  return 0.5f * x * (1.0f + tanhf(inner));\n"
    "}\n"
    "__device__ __forceinline__ float recap_silu(float x) { return x / (1.0f + expf(-x)); }\n"
    "__device__ __forceinline__ float recap_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "__device__ __forceinline__ float recap_tanh(float x) { return tanhf(x); }\n"
    "__device__ __forceinline__ float recap_exp(float x) { return expf(x); }\n"
    "__device__ __forceinline__ float recap_neg(float x) { return -x; }\n"
    "\n"
    "struct recap_expr_params {\n"
    "  const void *in[8];\n"
    "  void *out;\n"
    "  long long shape[4];\n"
    "  long long in_strides[8][4];\n"
    "  long long out_strides[4];\n"
    "  long long n;\n"
    "};\n";

/* The element function: f32 inputs in, the root's f32 value out. */
static void emit_eval(recap__text *b, const recap__expr_program *p) {
  recap__text_put(b, "\n__device__ __forceinline__ float recap_expr_eval(");
  for (int i = 0; i < p->num_inputs; ++i) recap__text_put(b, "%sconst float x%d", i ? ", " : "", i);
  recap__text_put(b, ") {\n");
  for (int l = 0; l < p->num_live; ++l) {
    const int id = p->live[l];
    const recap__expr_node_data *n = &p->nodes[id];
    recap__text_put(b, "  const float v%d = ", id);
    switch (n->op) {
      case RECAP_EXPR_INPUT:
        recap__text_put(b, "x%d;\n", n->index);
        continue;
      case RECAP_EXPR_CONST:
        recap__text_put(b, "__uint_as_float(0x%08xu);\n", (unsigned)f32_bits(n->value));
        continue;
      case RECAP_EXPR_SCALE:
        recap__text_put(b, "__uint_as_float(0x%08xu) * v%d;\n", (unsigned)f32_bits(n->value), n->a);
        continue;
      case RECAP_EXPR_CAST:
        if (n->dtype == RECAP_DTYPE_F32)
          recap__text_put(b, "v%d;\n", n->a);
        else
          recap__text_put(b, "recap_from_%s(recap_to_%s(v%d));\n", suffix_of(n->dtype),
                          suffix_of(n->dtype), n->a);
        continue;
      case RECAP_EXPR_SELECT:
        recap__text_put(b, "v%d != 0.0f ? v%d : v%d;\n", n->a, n->b, n->c);
        continue;
      case RECAP_EXPR_ADD:
        recap__text_put(b, "v%d + v%d;\n", n->a, n->b);
        continue;
      case RECAP_EXPR_SUB:
        recap__text_put(b, "v%d - v%d;\n", n->a, n->b);
        continue;
      case RECAP_EXPR_MUL:
        recap__text_put(b, "v%d * v%d;\n", n->a, n->b);
        continue;
      case RECAP_EXPR_DIV:
        recap__text_put(b, "v%d / v%d;\n", n->a, n->b);
        continue;
      case RECAP_EXPR_LT:
      case RECAP_EXPR_LE:
      case RECAP_EXPR_GT:
      case RECAP_EXPR_GE:
      case RECAP_EXPR_EQ:
      case RECAP_EXPR_NE:
        recap__text_put(b, "v%d %s v%d ? 1.0f : 0.0f;\n", n->a, recap__expr_op_name(n->op), n->b);
        continue;
      default:
        /* The parameterless unary functions, by their fixed names. */
        recap__text_put(b, "recap_%s(v%d);\n", recap__expr_op_name(n->op), n->a);
        continue;
    }
  }
  recap__text_put(b, "  return v%d;\n}\n", p->root);
}

static void emit_strided(recap__text *b, const recap__expr_program *p,
                         const recap__expr_signature *sig, const bool *used) {
  recap__text_put(b,
                  "\nextern \"C\" __global__ void __launch_bounds__(256)\n"
                  "recap_expr_strided(const recap_expr_params p) {\n"
                  "  recap_pdl_begin();\n"
                  "  const long long step = (long long)gridDim.x * blockDim.x;\n"
                  "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < p.n; "
                  "i += step) {\n"
                  "    long long r = i;\n"
                  "    const long long c3 = r %% p.shape[3];\n"
                  "    r /= p.shape[3];\n"
                  "    const long long c2 = r %% p.shape[2];\n"
                  "    r /= p.shape[2];\n"
                  "    const long long c1 = r %% p.shape[1];\n"
                  "    const long long c0 = r / p.shape[1];\n");
  for (int i = 0; i < p->num_inputs; ++i) {
    if (!used[i]) continue;
    recap__text_put(
        b,
        "    const float x%d = recap_from_%s(((const %s *)p.in[%d])[c0 * p.in_strides[%d][0] + "
        "c1 * p.in_strides[%d][1] + c2 * p.in_strides[%d][2] + c3 * p.in_strides[%d][3]]);\n",
        i, suffix_of(sig->inputs[i]), type_of(sig->inputs[i]), i, i, i, i, i);
  }
  recap__text_put(
      b,
      "    ((%s *)p.out)[c0 * p.out_strides[0] + c1 * p.out_strides[1] + c2 * p.out_strides[2] "
      "+ c3 * p.out_strides[3]] = recap_to_%s(recap_expr_eval(",
      type_of(sig->output), suffix_of(sig->output));
  for (int i = 0; i < p->num_inputs; ++i) {
    if (used[i])
      recap__text_put(b, "%sx%d", i ? ", " : "", i);
    else
      recap__text_put(b, "%s0.0f", i ? ", " : "");
  }
  recap__text_put(b, "));\n  }\n}\n");
}

/* Vector loads/stores of RECAP_EXPR_VEC (4) elements: a float4 for f32, a uint2 of four
 * 16-bit values otherwise. */
static void emit_dense(recap__text *b, const recap__expr_program *p,
                       const recap__expr_signature *sig, const bool *used) {
  recap__text_put(
      b,
      "\nextern \"C\" __global__ void __launch_bounds__(128)\n"
      "recap_expr_dense(const recap_expr_params p) {\n"
      "  recap_pdl_begin();\n"
      "  const long long base = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * 4;\n"
      "  if (base >= p.n) return;\n"
      "  if (base + 4 <= p.n) {\n");
  for (int i = 0; i < p->num_inputs; ++i) {
    if (!used[i]) continue;
    recap__text_put(b, "    float x%d[4];\n", i);
    if (sig->inputs[i] == RECAP_DTYPE_F32) {
      recap__text_put(b,
                      "    { const float4 w = *(const float4 *)((const float *)p.in[%d] + base);\n"
                      "      x%d[0] = w.x; x%d[1] = w.y; x%d[2] = w.z; x%d[3] = w.w; }\n",
                      i, i, i, i, i);
    } else {
      const char *s = suffix_of(sig->inputs[i]);
      recap__text_put(
          b,
          "    { const uint2 w = *(const uint2 *)((const recap_u16 *)p.in[%d] + base);\n"
          "      x%d[0] = recap_from_%s((recap_u16)(w.x & 0xffffu));\n"
          "      x%d[1] = recap_from_%s((recap_u16)(w.x >> 16));\n"
          "      x%d[2] = recap_from_%s((recap_u16)(w.y & 0xffffu));\n"
          "      x%d[3] = recap_from_%s((recap_u16)(w.y >> 16)); }\n",
          i, i, s, i, s, i, s, i, s);
    }
  }
  recap__text_put(
      b,
      "    float y[4];\n#pragma unroll\n    for (int k = 0; k < 4; ++k) y[k] = recap_expr_eval(");
  for (int i = 0; i < p->num_inputs; ++i) {
    if (used[i])
      recap__text_put(b, "%sx%d[k]", i ? ", " : "", i);
    else
      recap__text_put(b, "%s0.0f", i ? ", " : "");
  }
  recap__text_put(b, ");\n");
  if (sig->output == RECAP_DTYPE_F32) {
    recap__text_put(
        b, "    *(float4 *)((float *)p.out + base) = make_float4(y[0], y[1], y[2], y[3]);\n");
  } else {
    const char *s = suffix_of(sig->output);
    recap__text_put(b,
                    "    uint2 w;\n"
                    "    w.x = (unsigned)recap_to_%s(y[0]) | ((unsigned)recap_to_%s(y[1]) << 16);\n"
                    "    w.y = (unsigned)recap_to_%s(y[2]) | ((unsigned)recap_to_%s(y[3]) << 16);\n"
                    "    *(uint2 *)((recap_u16 *)p.out + base) = w;\n",
                    s, s, s, s);
  }
  recap__text_put(
      b,
      "  } else {\n    for (long long e = base; e < p.n; ++e)\n      ((%s *)p.out)[e] = "
      "recap_to_%s(recap_expr_eval(",
      type_of(sig->output), suffix_of(sig->output));
  for (int i = 0; i < p->num_inputs; ++i) {
    if (used[i])
      recap__text_put(b, "%srecap_from_%s(((const %s *)p.in[%d])[e])", i ? ", " : "",
                      suffix_of(sig->inputs[i]), type_of(sig->inputs[i]), i);
    else
      recap__text_put(b, "%s0.0f", i ? ", " : "");
  }
  recap__text_put(b, "));\n  }\n}\n");
}

static bool float_dtype(recap_dtype d) {
  return d == RECAP_DTYPE_F32 || d == RECAP_DTYPE_F16 || d == RECAP_DTYPE_BF16;
}

recap_status recap__expr_codegen_cuda(const recap__expr_program *p,
                                      const recap__expr_signature *sig, char **source) {
  RECAP_CHECK_ARG(p && sig && source);
  if (!p->finished)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the expression is not finished");
  if (sig->num_inputs != p->num_inputs)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the signature has %d inputs, the expression %d", sig->num_inputs,
                      p->num_inputs);
  for (int i = 0; i < sig->num_inputs; ++i)
    if (!float_dtype(sig->inputs[i]))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "input %d's dtype is not f32, f16 or bf16",
                        i);
  if (!float_dtype(sig->output))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the output dtype is not f32, f16 or bf16");
  bool used[RECAP_OP_MAX_INPUTS] = {false};
  for (int l = 0; l < p->num_live; ++l) {
    const recap__expr_node_data *n = &p->nodes[p->live[l]];
    if (n->op == RECAP_EXPR_INPUT) used[n->index] = true;
  }

  recap__text b = {0};
  recap__text_put(&b,
                  "/* recap expression kernels, generated from an expression tree of %d nodes.\n",
                  p->num_live);
  recap__text_put(&b, " * inputs:");
  for (int i = 0; i < sig->num_inputs; ++i) recap__text_put(&b, " %s", suffix_of(sig->inputs[i]));
  recap__text_put(&b, "; output: %s */\n", suffix_of(sig->output));
  recap__text_put(&b, "%s", prelude);
  recap__text_put(
      &b, "static_assert(sizeof(recap_expr_params) == %zu, \"recap__expr_params layout\");\n",
      sizeof(recap__expr_params));
  emit_eval(&b, p);
  emit_strided(&b, p, sig, used);
  emit_dense(&b, p, sig, used);
  if (b.failed) {
    free(b.data);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an expression's CUDA source");
  }
  *source = b.data;
  return RECAP_OK;
}
