/*
 * dtype.c: element types, the public recap_dtype_* functions. They belong to the lowest
 * layer: the runtime itself sizes and names tensors (communicators, device copies), and may
 * call nothing above it.
 */
#include <string.h>

#include "include/recap.h"
#include "runtime/error.h"

static const struct {
  const char *name;
  size_t size;
  int is_float;
} dtype_info[RECAP_DTYPE_COUNT] = {
#define RECAP_DTYPE_INFO_(name, text, size, is_float) {text, size, is_float},
    RECAP_DTYPE_MAP(RECAP_DTYPE_INFO_)
#undef RECAP_DTYPE_INFO_
};

static int dtype_valid(recap_dtype dtype) {
  return (int)dtype >= 0 && dtype < RECAP_DTYPE_COUNT;
}

const char *recap_dtype_name(recap_dtype dtype) {
  return dtype_valid(dtype) ? dtype_info[dtype].name : NULL;
}

size_t recap_dtype_size(recap_dtype dtype) {
  return dtype_valid(dtype) ? dtype_info[dtype].size : 0;
}

int recap_dtype_is_float(recap_dtype dtype) {
  return dtype_valid(dtype) ? dtype_info[dtype].is_float : 0;
}

/* PyTorch's names (torch.float32, ...), which spec authors and `recap import-hf --dtype` users
 * type as often as the short ones; recap_dtype_name keeps printing the short ones. */
static const char *const long_names[RECAP_DTYPE_COUNT] = {
    [RECAP_DTYPE_F32] = "float32", [RECAP_DTYPE_F16] = "float16", [RECAP_DTYPE_BF16] = "bfloat16",
    [RECAP_DTYPE_I32] = "int32",   [RECAP_DTYPE_I64] = "int64",
};

const char *recap_dtype_long_name(recap_dtype dtype) {
  return dtype_valid(dtype) ? long_names[dtype] : NULL;
}

recap_status recap_dtype_parse(const char *name, recap_dtype *out) {
  RECAP_CHECK_ARG(name && out);
  for (int d = 0; d < RECAP_DTYPE_COUNT; ++d) {
    if (strcmp(name, dtype_info[d].name) == 0 || strcmp(name, long_names[d]) == 0) {
      *out = (recap_dtype)d;
      return RECAP_OK;
    }
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "unknown dtype '%s' (expected f32, f16, bf16, i32 or i64, or PyTorch's "
                    "float32, float16, bfloat16, int32 or int64)",
                    name);
}
