/*
 * rope.c: the attributes of the rotary embedding and their checks, one definition for every op
 * that rotates (rope; paged_rope_kv_write; paged_rope_attention), so their spec spelling, defaults
 * and refusals cannot drift apart (kernels/rope.h).
 */
#include "kernels/rope.h"

#include <float.h>
#include <stddef.h>

#include "kernels/infer.h"

const recap__attr_def recap__rope_attrs[] = {
    RECAP__ROPE_ATTR_DEFS,
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
