/*
 * infer.h: helpers for the ops' shape and dtype inference (internal to kernels/).
 *
 * Every infer error names the op and the offending input or attribute, so a user reading a
 * spec error knows what to fix:
 *
 *   if (w->shape[0] != d)
 *     return RECAP_OP_FAIL(call, "input 'weight' has shape %s, expected [%lld] (x's last dim)",
 *                          recap__shape_label(w).s, (long long)d);
 *
 * gives "op 'layernorm': layernorm_infer (reduce.c:80): input 'weight' has shape [5], ...".
 * Host-only code: no CUDA, usable by the engine and sanitizer builds.
 */
#ifndef RECAP_KERNELS_INFER_H
#define RECAP_KERNELS_INFER_H

#include "kernels/op.h"
#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element-type masks for recap__op_def.dtype_mask. */
#define RECAP__DTYPES_FLOAT \
  ((1u << RECAP_DTYPE_F32) | (1u << RECAP_DTYPE_F16) | (1u << RECAP_DTYPE_BF16))
#define RECAP__DTYPES_ALL (RECAP__DTYPES_FLOAT | (1u << RECAP_DTYPE_I32) | (1u << RECAP_DTYPE_I64))

/* Records an INVALID_ARGUMENT failure prefixed with "op '<name>': " and returns it. */
#define RECAP_OP_FAIL(call, ...)                                               \
  recap__error_context(RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, __VA_ARGS__), \
                       "op '%s': ", (call)->def->name)

/* A short string returned by value, so it can be formatted inline: label(x).s. */
typedef struct {
  char s[96];
} recap__label;

/* "[3, 4]". */
recap__label recap__shape_label(const recap_tensor *t);
/* The def's name of input `index` without the optional marker: "bias". */
recap__label recap__input_label(const recap__op_def *def, int index);
/* "f32", or "dtype(7)" for an invalid value. */
recap__label recap__dtype_label(recap_dtype dtype);

/* Normalizes an axis attribute (negative counts from the end, as in numpy) for a tensor of
 * `ndim` dims; fails naming the attribute when it is outside [-ndim, ndim). */
recap_status recap__infer_axis(const recap__op_call *call, const char *attr, int64_t axis, int ndim,
                               int64_t *out);
/* Fails unless input `index` has dtype `dtype`. */
recap_status recap__infer_dtype_is(const recap__op_call *call, int index, recap_dtype dtype);
/* Fails unless input `index` has dtype equal to input 0's. */
recap_status recap__infer_same_dtype(const recap__op_call *call, int index);
/* Fails unless input `index` has between min_dims and max_dims dims. */
recap_status recap__infer_ndim(const recap__op_call *call, int index, int min_dims, int max_dims);
/* Fails unless input `index`'s last dimension is unit-stride (or of size 1). */
recap_status recap__infer_last_dim_contiguous(const recap__op_call *call, int index);
/* A norm's weight or bias: fails unless input `index` is 1-D of input 0's last dimension, of
 * input 0's dtype, with unit stride. */
recap_status recap__infer_norm_param(const recap__op_call *call, int index);
/* Fails unless attrs.eps is finite and >= 0 (a norm's epsilon). */
recap_status recap__infer_eps(const recap__op_call *call);
/* Fails unless the dtype attribute `attr` is a float type. */
recap_status recap__infer_float_attr(const recap__op_call *call, const char *attr,
                                     recap_dtype dtype);
/* Reads attrs.sizes[0..num_sizes) as a shape (each entry >= 1, 1 to RECAP_MAX_DIMS entries)
 * for the attribute named `attr`. */
recap_status recap__infer_shape_attr(const recap__op_call *call, const char *attr, int *ndim,
                                     int64_t shape[RECAP_MAX_DIMS]);

/* Whether a finite `value` survives being stored as `dtype` the way fill and the inits store
 * it (rounded to float, then to f16 or bf16; converted to an integer): false, with the reason
 * after the value in `why` ("is not an i32 value", "becomes inf in f16 (its largest finite
 * value is 65504)"), when a float type would turn it infinite or an integer type cannot hold
 * it exactly (converting such a double is undefined in C). Infinite and NaN values are the
 * caller's to judge for float types (a fill of -inf is a mask); integer types refuse them. */
bool recap__value_fits_dtype(double value, recap_dtype dtype, char *why, size_t size);

/* Describes output `index` as a contiguous tensor of the given dtype and shape; its data
 * pointer is left as the caller bound it. */
void recap__infer_output(recap__op_call *call, int index, recap_dtype dtype, int ndim,
                         const int64_t *shape);

#ifdef __cplusplus
}
#endif

#endif
