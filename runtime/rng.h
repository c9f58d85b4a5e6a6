/*
 * rng.h: the runtime's random number generators and their graph-safe use (internal).
 *
 * One Philox4x32-10 generator per device per backend holds {seed, offset}; every random op
 * ("draw") takes the current offset and advances it by 1 (include/recap.h states the
 * counter layout; runtime/philox.h computes it). A random op's launcher asks for its
 * (seed, offset) with recap__rng_next and passes the recap__philox_args to its kernel:
 *
 *   recap__philox_args philox;
 *   RECAP_TRY(recap__rng_next(stream, &philox));
 *   launch my_dropout_kernel(..., philox) on stream   // kernel: recap__philox_resolve()
 *
 * Graph safety. A captured kernel keeps its parameters, so an offset passed by value would
 * make every replay draw the same numbers. Instead, a capture that may draw owns a 16-byte
 * "slot" in device memory, {seed, base offset}; captured draws read it in the kernel and add
 * their position within the capture (slot_delta). Before every replay the graph layer
 * reserves the capture's draws from the generator and writes the slot in stream order, so
 * replays draw exactly what the same sequence of eager draws would have drawn, and
 * recap_rng_get_state() reflects them. The graph layer's protocol:
 *
 *   RECAP_TRY(recap__rng_capture_begin(stream));             // allocates: before capture
 *   st = recap__capture_begin(stream, mode);
 *   if (st != RECAP_OK) { recap__rng_capture_abort(stream); return st; }
 *   ... ops (recap__rng_capture_attach(stream, side) for each side stream that joins) ...
 *   st = recap__capture_end(stream, &graph);
 *   if (st != RECAP_OK) { recap__rng_capture_abort(stream); return st; }
 *   RECAP_TRY(recap__rng_capture_end(stream, &binding));     // NULL when nothing drew
 *   ... instantiate ...
 *   for each replay:
 *     RECAP_TRY(recap__rng_replay_prepare(binding, stream)); // NULL binding: no-op
 *     RECAP_TRY(backend->graph_launch(exec, stream));
 *   recap__rng_graph_binding_destroy(binding);               // with the graph exec
 *
 * A random op on a capturing stream without a slot fails (it would bake one offset into the
 * graph): RECAP_STATUS_ILLEGAL_DURING_CAPTURE on the capture's origin stream, and
 * RECAP_STATUS_NOT_SUPPORTED on a side stream that joined the capture but was not attached.
 *
 * Threading: all functions may be called from any thread; the generators and the capture
 * records share one mutex (a draw holds it for a few instructions). Replays of one binding
 * must be ordered by the caller (one stream at a time, as graph execs are), since they
 * share the slot.
 */
#ifndef RECAP_RUNTIME_RNG_H
#define RECAP_RUNTIME_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"
#include "runtime/philox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seed of a generator that was never seeded: fixed, so runs are reproducible unless
 * the program seeds explicitly (recap_rng_manual_seed, or recap_rng_seed for a random one). */
#define RECAP__RNG_DEFAULT_SEED UINT64_C(67280421310721)

/* What a graph needs to replay its draws: the capture's slot on `device`, and how many
 * draws the capture made (the generator's offset advances by `increment` per replay).
 * Owned by the graph layer; read-only for it; freed with recap__rng_graph_binding_destroy. */
typedef struct recap__rng_graph_binding {
  recap_device device;
  const recap__backend *backend;
  uint64_t *slot; /* {seed, base offset} in the device's memory */
  uint64_t increment;
} recap__rng_graph_binding;

/* The (seed, offset) source of one draw on `stream`, for a random op's launcher. Not
 * capturing: the generator's current offset by value, and the offset advances by 1.
 * Capturing: the capture's slot and the number of draws made earlier in the capture; the
 * generator does not advance (replays advance it). Fails as described above when the
 * stream is capturing without a slot; passes through a failing capture-status query. */
recap_status recap__rng_next(recap_stream *stream, recap__philox_args *out);

/* Allocates the RNG slot of a capture that will begin on `origin` and registers it. Call
 * BEFORE recap__capture_begin (allocation is illegal during a capture). Fails with
 * RECAP_STATUS_INVALID_ARGUMENT if `origin` is already capturing or already has a slot,
 * and with the backend's status if the allocation fails (nothing is registered then). */
recap_status recap__rng_capture_begin(recap_stream *origin);
/* Lets random ops on `side`, a stream that joined the capture begun on `origin`, draw from
 * that capture's slot (their draws are counted in host call order with the origin's).
 * RECAP_STATUS_INVALID_ARGUMENT if `origin` has no slot or `side` is on another device. */
recap_status recap__rng_capture_attach(recap_stream *origin, recap_stream *side);
/* Detaches the slot of `origin` once its capture has ended. *out receives a new binding, or
 * NULL when the capture made no draws (the slot is released then). Fails with
 * RECAP_STATUS_INVALID_ARGUMENT when `origin` has no slot or is still capturing (nothing
 * changes), and RECAP_STATUS_OUT_OF_MEMORY (the slot is released, nothing leaks). */
recap_status recap__rng_capture_end(recap_stream *origin, recap__rng_graph_binding **out);
/* Detaches and releases the slot of a capture that failed or was abandoned. No-op for a
 * stream without a slot (or NULL). */
void recap__rng_capture_abort(recap_stream *origin);

/* Before each replay of a graph with `binding`, on the stream the graph will be launched
 * on: reserves the binding's draws from its device's generator and writes {seed, first
 * offset} into the slot in stream order. binding == NULL is a no-op. Fails with
 * RECAP_STATUS_INVALID_ARGUMENT for a stream of another device,
 * RECAP_STATUS_ILLEGAL_DURING_CAPTURE on a capturing stream, and with the backend's status
 * if the write cannot be enqueued (the reserved offsets are then skipped, never reused). */
recap_status recap__rng_replay_prepare(const recap__rng_graph_binding *binding,
                                       recap_stream *stream);
/* A loop that replays a graph with `binding` up to `replays` times inside one launch (a WHILE
 * node whose body adds binding->increment to the slot's offset after each replay) reserves
 * all its draws at once: recap__rng_loop_prepare, before the launch and on its stream, takes
 * replays x increment offsets from the generator and writes {seed, first offset} into the
 * slot in stream order (as recap__rng_replay_prepare does for one replay); once the launch has
 * ended, recap__rng_loop_settle gives back the offsets of the replays that did not run, so the
 * generator's state is what `ran` single replays leave. It gives them back only when no draw
 * and no seeding took place since the reservation (the generator still stands at its end);
 * otherwise they are skipped, never reused. Fails as recap__rng_replay_prepare. */
typedef struct {
  uint64_t seed, first, end; /* the reservation: offsets [first, end) */
} recap__rng_loop_reservation;
recap_status recap__rng_loop_prepare(const recap__rng_graph_binding *binding, recap_stream *stream,
                                     uint64_t replays, recap__rng_loop_reservation *out);
void recap__rng_loop_settle(const recap__rng_graph_binding *binding,
                            const recap__rng_loop_reservation *reservation, uint64_t ran);
/* Releases the slot and the binding. The caller has made sure no replay that reads the slot
 * is still pending (as for the graph exec itself). NULL is accepted. */
void recap__rng_graph_binding_destroy(recap__rng_graph_binding *binding);

/* One draw of n values into `out` (memory of the stream's device), in stream order:
 * raw 32-bit words; uniform floats in [lo, hi) (finite, lo < hi, hi - lo finite); normal
 * floats with mean and std (finite, std >= 0). Capturable (graph-safe as above). n == 0
 * does nothing and does not draw. RECAP_STATUS_INVALID_ARGUMENT on bad arguments (nothing
 * drawn); otherwise the draw is consumed even if the launch then fails. */
recap_status recap__rng_fill_bits(recap_stream *stream, uint32_t *out, size_t n);
recap_status recap__rng_fill_uniform(recap_stream *stream, float *out, size_t n, float lo,
                                     float hi);
recap_status recap__rng_fill_normal(recap_stream *stream, float *out, size_t n, float mean,
                                    float std);

/* ---- The CUDA half (cuda_rng.c and rng.cu; present only when RECAP_WITH_CUDA) ---- */

typedef enum {
  RECAP__RNG_BITS = 0,    /* uint32_t words */
  RECAP__RNG_UNIFORM = 1, /* floats in [a, b) */
  RECAP__RNG_NORMAL = 2,  /* floats, mean a, std b */
} recap__rng_dist;

/* Launches the fill of one draw on a CUDA stream (cuda_rng.c: device guard, grid size,
 * status mapping). */
recap_status recap__cuda_rng_fill(recap_stream *stream, recap__rng_dist dist, void *out, size_t n,
                                  float a, float b, const recap__philox_args *philox);
/* Enqueues slot[0] = seed, slot[1] = offset on a CUDA stream (a one-thread kernel whose
 * parameters are copied at launch, so nothing on the host must outlive the call). */
recap_status recap__cuda_rng_write_slot(recap_stream *stream, uint64_t *slot, uint64_t seed,
                                        uint64_t offset);

/* rng.cu's launchers: cudaError_t as int, the calling thread's current device. */
int recap__rng_cuda_launch_fill(recap__rng_dist dist, void *out, size_t n, float a, float b,
                                recap__philox_args philox, unsigned max_blocks, void *cuda_stream);
int recap__rng_cuda_launch_write_slot(uint64_t *slot, uint64_t seed, uint64_t offset,
                                      void *cuda_stream);

#ifdef __cplusplus
}
#endif

#endif
