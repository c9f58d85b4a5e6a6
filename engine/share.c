/* share.c: params and state one pipeline takes from another (share.h). */
#include "engine/share.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "runtime/error.h"

static const char *role_name(recap_tensor_role role) {
  switch (role) {
    case RECAP_ROLE_PARAM:
      return "param";
    case RECAP_ROLE_STATE:
      return "state";
    case RECAP_ROLE_INPUT:
      return "input";
    case RECAP_ROLE_SCALAR:
      return "scalar";
    default:
      return "intermediate";
  }
}

static void describe(const recap__ir_tensor *t, char *buf, size_t size) {
  int used = snprintf(buf, size, "%s %s [", role_name(t->role), recap_dtype_name(t->dtype));
  for (int d = 0; d < t->ndim && used > 0 && (size_t)used < size; ++d)
    used +=
        snprintf(buf + used, size - (size_t)used, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
  if (used > 0 && (size_t)used < size) snprintf(buf + used, size - (size_t)used, "]");
}

recap_status recap__share_find(const recap_pipeline *share, const char *pipeline_name,
                               const recap__ir_tensor *t, void **memory) {
  *memory = NULL;
  const recap__model *sm = share->model;
  const recap__ir *sir = sm->irs[sm->num_buckets - 1];
  int s = recap__ir_find_tensor(sir, t->name);
  if (s < 0) return RECAP_OK;
  const recap__ir_tensor *st = &sir->tensors[s];
  bool same = st->role == t->role && st->dtype == t->dtype && st->ndim == t->ndim;
  for (int d = 0; same && d < t->ndim; ++d) same = st->shape[d] == t->shape[d];
  if (!same) {
    char here[160], there[160];
    describe(t, here, sizeof here);
    describe(st, there, sizeof there);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "tensor '%s' is a %s in pipeline '%s' but a %s in the pipeline it shares "
                      "with ('%s'): shared params and state must match in role, dtype and shape",
                      t->name, here, pipeline_name, there, sm->spec->name);
  }
  *memory = share->data[s];
  return RECAP_OK;
}
