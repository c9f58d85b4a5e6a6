/*
 * plan_text.h: the text `recap plan` prints, from a fused IR and its plan (engine/plan.h).
 * Only the command line shows it; a library of its own so that the tests of the planner and
 * of fusion check the same text the CLI prints.
 *
 *   char *fused, *text;
 *   if (cli_fuse_format(ir, fusion_on, &fused) == RECAP_OK) { fputs(fused, stdout); free(fused); }
 *   if (cli_plan_format(ir, plan, &text) == RECAP_OK) { fputs(text, stdout); free(text); }
 *
 * Both return a malloc'd string that the caller frees; on failure *text is untouched and
 * recap_last_error() says why.
 */
#ifndef RECAP_CLI_PLAN_TEXT_H
#define RECAP_CLI_PLAN_TEXT_H

#include <stdbool.h>

#include "engine/ir.h"
#include "engine/plan.h"
#include "include/recap.h"

/* A summary of the fusion pass: per fused op its index, name, stream, the spec ops it replaces
 * ("ops 3-5"), its inputs and output and the expression; or one line saying that nothing was
 * fused. `enabled` says whether the pass ran (engine/fuse.h). OUT_OF_MEMORY. */
recap_status cli_fuse_format(const recap__ir *ir, bool enabled, char **text);

/* A readable table: per tensor its name, role, bytes, offset, lifetime, stream and
 * in-place/view notes; then the waits and the totals (arena, naive sum, max-live lower bound).
 * `ir` must be the IR the plan was built from. Fails with RECAP_STATUS_INVALID_ARGUMENT if ir
 * and plan do not match, or RECAP_STATUS_OUT_OF_MEMORY. */
recap_status cli_plan_format(const recap__ir *ir, const recap__plan *plan, char **text);

/* A tensor role's name as the spec spells it ("input", "param", ...; "intermediate"). */
const char *cli_role_name(recap_tensor_role role);

#endif
