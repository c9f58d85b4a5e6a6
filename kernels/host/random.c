/*
 * host/random.c: host reference of random_uniform and random_normal, through the same
 * runtime/philox.h functions the CUDA kernel uses, so uniform draws are bit-identical across
 * backends and normal draws agree to a few ulp (see philox.h).
 */
#include "kernels/host/host_ops.h"
#include "runtime/half.h"
#include "runtime/philox.h"

recap_status recap__host_random(const recap__op_call *call) {
  const recap_tensor *out = &call->outputs[0];
  /* Resolved here, at run time: in a replayed capture the slot holds this replay's offset. */
  recap__philox_args args = {call->rng_seed, call->rng_offset, call->rng_slot,
                             call->rng_slot_delta};
  uint64_t seed, offset;
  recap__philox_resolve(&args, &seed, &offset);
  int64_t n = recap__tensor_numel(out);
  const recap__op_attrs *a = &call->attrs;
  for (int64_t block = 0; block * 4 < n; ++block) {
    recap__philox4x32 w = recap__philox_draw(seed, offset, (uint64_t)block);
    float values[4];
    if (call->def->code == 0) {
      for (int k = 0; k < 4; ++k)
        values[k] = recap__philox_uniform(w.v[k], (float)a->low, (float)a->high);
    } else {
      recap__philox_normal4(w, (float)a->mean, (float)a->std, values);
    }
    for (int k = 0; k < 4 && block * 4 + k < n; ++k)
      recap__store_f32(out->data, out->dtype, block * 4 + k, values[k]);
  }
  return RECAP_OK;
}
