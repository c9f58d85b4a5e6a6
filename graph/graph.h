/*
 * graph.h: what the layers above may do with a recap_graph beyond the public API (internal).
 *
 * A graph that draws random numbers reads its Philox {seed, offset} from a slot that
 * recap_graph_replay writes before each launch (runtime/rng.h). Replayed into a capture, that
 * write would be frozen into the enclosing graph, so recap_graph_replay refuses it. A WHILE
 * body that replays the graph once per iteration can instead move the slot on itself:
 *
 *   const recap__rng_graph_binding *rng;
 *   recap__graph_replay_into_body(step, body, &rng);  // child-graph node, no slot write
 *   ... a kernel in the body adds rng->increment to rng->slot[1] after the step ...
 *   per launch of the enclosing graph: recap__rng_loop_prepare(rng, stream, K, &reservation)
 *   after it: recap__rng_loop_settle(rng, &reservation, iterations that ran)
 */
#ifndef RECAP_GRAPH_GRAPH_H
#define RECAP_GRAPH_GRAPH_H

#include "include/recap.h"
#include "runtime/rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launches g's executable into `body`, a stream capturing a WHILE body, without writing its
 * RNG slot; *rng receives the graph's binding (NULL when it draws nothing). The binding lives
 * until g captures again or is reset or destroyed. */
recap_status recap__graph_replay_into_body(recap_graph *g, recap_stream *body,
                                           const recap__rng_graph_binding **rng);
/* The graph's binding now (NULL when it draws nothing): a caller holding an earlier one checks
 * it is still the same. */
const recap__rng_graph_binding *recap__graph_rng(const recap_graph *g);

#ifdef __cplusplus
}
#endif

#endif
