/*
 * op_codes.h: which member of an op family a shared launcher runs (recap__op_def.code).
 *
 * The elementwise ops share one host loop and one CUDA entry point per family
 * (recap__cuda_unary, recap__cuda_binary); the def's `code` picks the function. Host and CUDA
 * code both switch on these values, so they live in one header with no other dependencies.
 */
#ifndef RECAP_KERNELS_OP_CODES_H
#define RECAP_KERNELS_OP_CODES_H

enum recap__unary_code {
  RECAP_UNARY_RELU,
  RECAP_UNARY_GELU,      /* erf form */
  RECAP_UNARY_GELU_TANH, /* tanh approximation */
  RECAP_UNARY_SILU,
  RECAP_UNARY_SIGMOID,
  RECAP_UNARY_TANH,
  RECAP_UNARY_EXP,
  RECAP_UNARY_NEG,
  RECAP_UNARY_SCALE, /* out = attrs.scale * x */
  RECAP_UNARY_CAST,  /* out = x converted to attrs.dtype */
};

enum recap__binary_code {
  RECAP_BINARY_ADD,
  RECAP_BINARY_SUB,
  RECAP_BINARY_MUL,
  RECAP_BINARY_DIV,
};

#endif
