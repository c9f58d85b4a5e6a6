/*
 * call_state.c: the host reference's check of a call's state (recap__op_call.call_state).
 * The CUDA kernels that count their blocks in (paged attention's splits, sample's slices) rely
 * on finding it zero at every launch; the host references take the same bytes and check it, so
 * CI catches an engine that does not zero a call's state or lets another call write it.
 */
#include "kernels/host/host_ops.h"
#include "runtime/error.h"

recap_status recap__host_call_state_check(const recap__op_call *call) {
  const unsigned char *state = call->call_state;
  for (size_t i = 0; state && i < call->call_state_bytes; ++i)
    if (state[i])
      return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                        "op '%s': its call state is not zero at the launch (byte %zu): the "
                        "pipeline did not zero it, or another call wrote it",
                        call->def->name, i);
  return RECAP_OK;
}
