/*
 * rope.c: the attributes of the rotary embedding and their checks, one definition for every op
 * that rotates (rope; paged_rope_kv_write), so their spec spelling, defaults and refusals cannot
 * drift apart (kernels/rope.h).
 */
#include "kernels/rope.h"

#include <float.h>
#include <stddef.h>

#include "kernels/infer.h"

const recap__attr_def recap__rope_attrs[] = {
    {"theta", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, rope_theta), false, 0,
     "the base theta as a number (10000, 500000, 1e6, 10000.5): pair i's frequency is "
     "theta^(-2i/Dh); 0 or absent: `base`, else 10000. Give theta or base, not both"},
    {"base", RECAP_ATTR_INT, offsetof(recap__op_attrs, rope_base), false, 0,
     "theta as an integer, the older spelling; 0 or absent: `theta`, else 10000"},
    {"llama3", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, rope_llama3), false, 0,
     "Llama 3 frequency scaling (transformers' rope_type llama3); needs the next four"},
    {"factor", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, rope_factor), false, 0,
     "llama3: low frequencies are divided by it (> 0)"},
    {"low_freq_factor", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, rope_low_freq_factor), false, 0,
     "llama3: wavelengths above original_max_positions / low_freq_factor are low (> 0)"},
    {"high_freq_factor", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, rope_high_freq_factor), false,
     0,
     "llama3: wavelengths below original_max_positions / high_freq_factor are high and kept "
     "(> low_freq_factor)"},
    {"original_max_positions", RECAP_ATTR_INT, offsetof(recap__op_attrs, rope_original_max), false,
     0,
     "llama3: the context length of pretraining (> 0; a config's "
     "original_max_position_embeddings)"},
    {.name = NULL},
};

/* theta and the Llama 3 parameters (kernels/rope.h reads them). Every value must be a finite
 * f32, the type the angles are computed in; 0 means "not given" for all but llama3. */
recap_status recap__rope_check_attrs(recap__op_call *call) {
  const recap__op_attrs *a = &call->attrs;
  if (a->rope_theta != 0 && a->rope_base != 0)
    return RECAP_OP_FAIL(call,
                         "attributes 'theta' (%g) and 'base' (%lld) are both given: give one "
                         "(theta takes any number, base is its older integer spelling)",
                         a->rope_theta, (long long)a->rope_base);
  if (a->rope_base != 0 && a->rope_base < 2)
    return RECAP_OP_FAIL(call, "attribute 'base' = %lld must be >= 2", (long long)a->rope_base);
  if (a->rope_theta != 0 && !(a->rope_theta > 1 && a->rope_theta <= FLT_MAX))
    return RECAP_OP_FAIL(call, "attribute 'theta' = %g must be > 1 (and a finite f32)",
                         a->rope_theta);
  static const char *const llama3_names[] = {"factor", "low_freq_factor", "high_freq_factor",
                                             "original_max_positions"};
  const double llama3_values[] = {a->rope_factor, a->rope_low_freq_factor, a->rope_high_freq_factor,
                                  (double)a->rope_original_max};
  if (!a->rope_llama3) {
    /* Silently ignoring them would run a different model than the spec describes. */
    for (int k = 0; k < 4; ++k)
      if (llama3_values[k] != 0)
        return RECAP_OP_FAIL(call, "attribute '%s' applies only with llama3: true",
                             llama3_names[k]);
    return RECAP_OK;
  }
  /* No defaults: Llama 3.1 and 3.2 differ (factor 8 and 32), so each must be written. */
  for (int k = 0; k < 4; ++k)
    if (!(llama3_values[k] > 0 && llama3_values[k] <= FLT_MAX))
      return RECAP_OP_FAIL(call,
                           "attribute '%s' = %g must be > 0 (and a finite f32); llama3 needs "
                           "factor, low_freq_factor, high_freq_factor and "
                           "original_max_positions",
                           llama3_names[k], llama3_values[k]);
  if (!(a->rope_high_freq_factor > a->rope_low_freq_factor))
    return RECAP_OP_FAIL(call,
                         "attribute 'high_freq_factor' = %g must be greater than "
                         "'low_freq_factor' = %g",
                         a->rope_high_freq_factor, a->rope_low_freq_factor);
  return RECAP_OK;
}
