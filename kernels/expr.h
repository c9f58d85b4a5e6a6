/*
 * expr.h: elementwise expressions as data (internal to recap): an AST built by the parser of
 * the spec's `expr:` attribute or programmatically (the fusion pass), evaluated on the host,
 * and turned into one generated CUDA kernel that is compiled with NVRTC at load time.
 *
 * Building a program by hand (the fusion pass does this):
 *
 *   recap__expr_program *p;
 *   RECAP_TRY(recap__expr_program_create(2, &p));          // two inputs: 0 and 1
 *   recap__expr_node a = recap__expr_input(p, 0), b = recap__expr_input(p, 1);
 *   recap__expr_node r = recap__expr_binary(p, RECAP_EXPR_ADD,
 *                          recap__expr_binary(p, RECAP_EXPR_MUL, a,
 *                                             recap__expr_unary(p, RECAP_EXPR_SIGMOID, b)),
 *                          recap__expr_const(p, 1.0));
 *   st = recap__expr_program_finish(p, r);   // the first constructor error, or OK
 *   ...
 *   recap__expr_program_destroy(p);
 *
 * From text (the spec loader does this; names are the op's `in:` names):
 *
 *   const char *names[] = {"x", "gate"};
 *   recap__expr_parse_error err;
 *   st = recap__expr_parse("x * sigmoid(gate) + 1.0", SIZE_MAX, names, 2, NULL, &p, &err);
 *   // on RECAP_STATUS_SPEC_ERROR: err.offset is the byte offset of the bad token in the text
 *
 * Semantics (host and CUDA agree): every input element is loaded as f32 (from f32, f16 or
 * bf16 storage), every node computes in f32 (its value is rounded to f32, so + - * / are the
 * IEEE f32 operations), and the root is stored in the output's dtype (round to nearest even).
 * Comparisons give 1.0 or 0.0; select(c, x, y) is x where c != 0, else y (NaN counts as
 * != 0, as in C). A program takes its input/output dtypes from the tensors it runs on (host)
 * or from the dtype signature it is compiled for (CUDA): the AST itself is untyped, so one
 * program serves every dtype combination (each combination is its own compiled kernel).
 *
 * Broadcasting is the kernel's indexing, not the AST's: each input is read through strides
 * that give 0 along its broadcast dimensions (numpy rules, right-aligned, up to 4 dims).
 *
 * Ownership and threads: a finished program is immutable and may be shared by threads and by
 * copies of op calls (recap__op_attrs.expr points at it; whoever created it destroys it after
 * every call using it is gone: the spec for parsed programs, the fusion pass's pipeline for
 * built ones). The compiled kernels hang off the program in a write-once cache guarded by a
 * lock, filled by recap__expr_prepare_cuda (at load/warmup), freed by program_destroy.
 *
 * Failures: constructors return RECAP_EXPR_NONE and record the first error in the program
 * (limits, a bad input index, a non-finite constant, an operand that is RECAP_EXPR_NONE);
 * recap__expr_program_finish returns it, so a builder checks once at the end. Every other
 * fallible function returns a recap_status with a detail message (recap_last_error()).
 */
#ifndef RECAP_KERNELS_EXPR_H
#define RECAP_KERNELS_EXPR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"
#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits, enforced by the parser and the constructors (documented in specs/README.md). */
enum {
  RECAP_EXPR_MAX_TEXT = 4096, /* bytes of expression text */
  RECAP_EXPR_MAX_DEPTH = 64,  /* nesting of a PARSED tree (a leaf has depth 1): the parser
                               * recurses, so text gets this bound */
  RECAP_EXPR_MAX_NODES = 512, /* nodes in one program */
  /* Nesting of a program BUILT with the constructors (the fusion pass: a chain of N ops is N
   * deep). Evaluation and code generation walk the node array in order, never recursing, so
   * only the node count bounds it. */
  RECAP_EXPR_MAX_BUILD_DEPTH = RECAP_EXPR_MAX_NODES,
};

/* What a node computes. Operands are a (unary), a and b (binary), a, b and c (select). */
typedef enum {
  RECAP_EXPR_INPUT, /* input number `index` */
  RECAP_EXPR_CONST, /* `value` (finite), rounded to f32 */
  /* Unary functions: exactly the op library's unary ops (kernels/elementwise.c). */
  RECAP_EXPR_RELU,
  RECAP_EXPR_GELU,      /* erf form */
  RECAP_EXPR_GELU_TANH, /* tanh approximation */
  RECAP_EXPR_SILU,
  RECAP_EXPR_SIGMOID,
  RECAP_EXPR_TANH,
  RECAP_EXPR_EXP,
  RECAP_EXPR_NEG,
  RECAP_EXPR_SCALE, /* a * value (the `scale` op; value finite) */
  RECAP_EXPR_CAST,  /* a rounded to `dtype` (f32, f16, bf16) and read back as f32 */
  /* Binary arithmetic. */
  RECAP_EXPR_ADD,
  RECAP_EXPR_SUB,
  RECAP_EXPR_MUL,
  RECAP_EXPR_DIV,
  /* Comparisons: 1.0 when true, else 0.0 (false whenever an operand is NaN, except NE). */
  RECAP_EXPR_LT,
  RECAP_EXPR_LE,
  RECAP_EXPR_GT,
  RECAP_EXPR_GE,
  RECAP_EXPR_EQ,
  RECAP_EXPR_NE,
  /* a != 0 ? b : c */
  RECAP_EXPR_SELECT,
  RECAP_EXPR_OP_COUNT
} recap__expr_op;

/* A node of a program under construction: its index (>= 0), or RECAP_EXPR_NONE. */
typedef int32_t recap__expr_node;
#define RECAP_EXPR_NONE ((recap__expr_node)-1)

typedef struct recap__expr_node_data {
  recap__expr_op op;
  int32_t a, b, c;   /* operand nodes, -1 when unused; always smaller than the node's index */
  int index;         /* INPUT */
  double value;      /* CONST, SCALE */
  recap_dtype dtype; /* CAST */
  int depth;         /* 1 for leaves */
} recap__expr_node_data;

typedef struct recap__expr_program recap__expr_program;

/* ---- building ----------------------------------------------------------------------------- */

/* An empty program over `num_inputs` inputs (1..RECAP_OP_MAX_INPUTS). */
recap_status recap__expr_program_create(int num_inputs, recap__expr_program **out);
/* Frees the program and its compiled kernels (which must no longer be running). NULL is fine. */
void recap__expr_program_destroy(recap__expr_program *program);

recap__expr_node recap__expr_input(recap__expr_program *p, int index);
recap__expr_node recap__expr_const(recap__expr_program *p, double value);
/* op is RECAP_EXPR_RELU .. RECAP_EXPR_NEG (the parameterless unary functions). */
recap__expr_node recap__expr_unary(recap__expr_program *p, recap__expr_op op, recap__expr_node a);
recap__expr_node recap__expr_scale(recap__expr_program *p, recap__expr_node a, double factor);
recap__expr_node recap__expr_cast(recap__expr_program *p, recap__expr_node a, recap_dtype dtype);
/* op is RECAP_EXPR_ADD .. RECAP_EXPR_NE. */
recap__expr_node recap__expr_binary(recap__expr_program *p, recap__expr_op op, recap__expr_node a,
                                    recap__expr_node b);
recap__expr_node recap__expr_select(recap__expr_program *p, recap__expr_node cond,
                                    recap__expr_node if_true, recap__expr_node if_false);

/* Helpers for the fusion pass: the node for an op library unary op (def->code, a
 * recap__unary_code from op_codes.h, with its attrs.scale / attrs.dtype) or binary op
 * (a recap__binary_code). */
recap__expr_node recap__expr_from_unary_code(recap__expr_program *p, int unary_code,
                                             recap__expr_node a, const recap__op_attrs *attrs);
recap__expr_node recap__expr_from_binary_code(recap__expr_program *p, int binary_code,
                                              recap__expr_node a, recap__expr_node b);

/* Makes `root` the program's result and freezes it. Returns the first error a constructor
 * recorded, or INVALID_ARGUMENT when root is RECAP_EXPR_NONE or the program is already
 * finished. Nodes not reachable from root are kept but never evaluated or generated. */
recap_status recap__expr_program_finish(recap__expr_program *p, recap__expr_node root);

/* ---- reading ------------------------------------------------------------------------------ */

int recap__expr_num_inputs(const recap__expr_program *p);
/* The nodes, in construction order (operands before users), and the root. */
const recap__expr_node_data *recap__expr_nodes(const recap__expr_program *p, int *count);
recap__expr_node recap__expr_root(const recap__expr_program *p);
/* The spelling of an op in expression text ("sigmoid", "+", "<", "select"...). */
const char *recap__expr_op_name(recap__expr_op op);
/* Writes the program as expression text with inputs named in0, in1... (or `names`, when not
 * NULL), fully parenthesized; for messages and `recap plan`. Truncates to `size`. */
void recap__expr_format(const recap__expr_program *p, const char *const *names, char *buf,
                        size_t size);

/* ---- parsing ------------------------------------------------------------------------------ */

/* Grammar (specs/README.md has it with examples):
 *   expr    := compare
 *   compare := sum (('<' | '<=' | '>' | '>=' | '==' | '!=') sum)?     (not chained)
 *   sum     := product (('+' | '-') product)*
 *   product := unary (('*' | '/') unary)*
 *   unary   := '-' unary | primary
 *   primary := number | name | name '(' args ')' | '(' expr ')'
 * Numbers are decimal (1, 1.5, .5, 1e-3); names are the op's input names; functions are
 * relu gelu gelu_tanh silu sigmoid tanh exp neg (one argument), scale(x, number),
 * cast(x, f32|f16|bf16) and select(cond, x, y). Whitespace is spaces, tabs and newlines. */
typedef struct {
  size_t offset; /* byte offset into the text of the token the error is about */
  char message[256];
} recap__expr_parse_error;

typedef struct {
  size_t max_text; /* 0: RECAP_EXPR_MAX_TEXT */
  int max_depth;   /* 0: RECAP_EXPR_MAX_DEPTH */
  int max_nodes;   /* 0: RECAP_EXPR_MAX_NODES */
} recap__expr_limits;

/* Parses `len` bytes of `text` (or up to its NUL when len is SIZE_MAX) over inputs named
 * names[0..num_inputs). On a syntax error, an unknown name or function, a limit, or a NUL
 * inside the text, fills *err (offset and message) and returns RECAP_STATUS_SPEC_ERROR
 * (recap_last_error() holds "expression: offset N: message"). OUT_OF_MEMORY when an
 * allocation fails. limits may be NULL (defaults; they can only be lowered). On success
 * *out is a finished program the caller destroys. */
recap_status recap__expr_parse(const char *text, size_t len, const char *const *names,
                               int num_inputs, const recap__expr_limits *limits,
                               recap__expr_program **out, recap__expr_parse_error *err);

/* ---- host evaluation ---------------------------------------------------------------------- */

/* The dtype an expr op's output gets from its inputs: their common dtype when they all have
 * one, else f32 (PyTorch's promotion among f32, f16 and bf16). */
recap_dtype recap__expr_result_dtype(const recap_tensor *inputs, int num_inputs);

/* out = program(inputs) on host memory. inputs[i] (f32/f16/bf16, any strides) broadcast to
 * out's shape by numpy rules; out (f32/f16/bf16) any strides. INVALID_ARGUMENT when counts,
 * dtypes or shapes do not fit. Allocates nothing. */
recap_status recap__expr_eval_host(const recap__expr_program *p, const recap_tensor *inputs,
                                   int num_inputs, const recap_tensor *out);

/* ---- CUDA source -------------------------------------------------------------------------- */

/* The dtypes one compiled kernel serves. */
typedef struct {
  int num_inputs;
  recap_dtype inputs[RECAP_OP_MAX_INPUTS];
  recap_dtype output;
} recap__expr_signature;

/* The kernels' parameter block, passed by value (the generated source declares the same
 * layout). shape is the output's, right-aligned to 4 dims (leading 1s); in_strides[i] are
 * input i's element strides over that shape (0 along broadcast dims); out_strides the
 * output's. n = number of elements. The dense kernel ignores the strides. */
typedef struct {
  const void *in[RECAP_OP_MAX_INPUTS];
  void *out;
  int64_t shape[4];
  int64_t in_strides[RECAP_OP_MAX_INPUTS][4];
  int64_t out_strides[4];
  int64_t n;
} recap__expr_params;

/* Names of the two kernels in every generated source (extern "C", so unmangled):
 * the strided kernel (grid-stride loop over 4-D indices, any strides) and the dense one
 * (all inputs and the output contiguous with the output's shape and aligned to
 * RECAP_EXPR_DENSE_ALIGN bytes: each thread does RECAP_EXPR_VEC elements with vector loads,
 * and the last thread of the grid the tail). */
#define RECAP_EXPR_KERNEL_STRIDED "recap_expr_strided"
#define RECAP_EXPR_KERNEL_DENSE "recap_expr_dense"
enum { RECAP_EXPR_VEC = 4, RECAP_EXPR_DENSE_ALIGN = 16 };

/* Generates the CUDA C++ source of the program's kernels for `sig` into a malloc'd
 * NUL-terminated string (*source, freed by the caller). The source is built from the AST
 * only: no text of the spec appears in it, constants are written as exact bit patterns, and
 * the same program and signature always give the same bytes. INVALID_ARGUMENT for an
 * unfinished program or a bad signature; OUT_OF_MEMORY. */
recap_status recap__expr_codegen_cuda(const recap__expr_program *p,
                                      const recap__expr_signature *sig, char **source);

/* ---- compiling and launching (CUDA builds; kernels/expr_cuda.c) --------------------------- */

/* Generates, compiles (NVRTC, through the disk cache, for the device's exact architecture)
 * and loads the kernels for `sig` on CUDA device `device` (-1: the current device; the
 * current device is restored), unless they are already loaded there; thread-safe.
 * NOT_SUPPORTED naming libnvrtc when NVRTC cannot be loaded (host-only builds: NOT_SUPPORTED
 * too). `op_name` names the op in messages. Called at pipeline load (recap__expr_prepare_call),
 * never needed inside a capture. */
recap_status recap__expr_prepare_cuda(const recap__expr_program *p,
                                      const recap__expr_signature *sig, int device,
                                      const char *op_name);

/* Launches the prepared kernels for the call's tensors on `cuda_stream` (a cudaStream_t).
 * When they are not loaded yet it compiles them first, unless the stream is capturing: then
 * it fails (ILLEGAL_DURING_CAPTURE, naming the op) rather than compile inside a capture. */
recap_status recap__expr_launch_cuda(const recap__expr_program *p, const recap_tensor *inputs,
                                     int num_inputs, const recap_tensor *out, const char *op_name,
                                     void *cuda_stream);

/* The expr op's prepare step, for the engine to call on every bound op call of a pipeline
 * before anything is captured (at load): for a call whose attrs.expr is set (an expr op, or a
 * fused chain) on a CUDA device, compiles and loads its kernel there
 * (recap__expr_prepare_cuda); otherwise does nothing and returns OK. */
recap_status recap__expr_prepare_call(const recap__op_call *call, recap_device device);

#if RECAP_WITH_CUDA
/* The expr op's CUDA entry point (recap__op_def.launch_cuda; kernels/expr.cu). */
recap_status recap__cuda_expr(const recap__op_call *call, void *cuda_stream);
#endif

/* The signature of a call's tensors (inputs[0..num_inputs) and out). */
void recap__expr_signature_of(const recap_tensor *inputs, int num_inputs, const recap_tensor *out,
                              recap__expr_signature *sig);

/* Fills params from the call's tensors: out's shape right-aligned to 4 dims, each input's
 * strides broadcast to it. INVALID_ARGUMENT when an input does not broadcast to out. Shared
 * by the CUDA launcher and the tests. */
recap_status recap__expr_params_of(const recap_tensor *inputs, int num_inputs,
                                   const recap_tensor *out, recap__expr_params *params);

#ifdef __cplusplus
}
#endif

#endif
