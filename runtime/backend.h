/*
 * backend.h: the interface every execution backend implements (internal to recap).
 *
 * The runtime's public functions (device.c, stream.c, event.c, graph.c in allocator/) check
 * arguments and then call through a recap__backend. Two implementations: `cuda`
 * (runtime/cuda_backend.c) and `host` (runtime/host_backend.c). Everything above the
 * runtime talks to this interface, so the allocator, planner, executor and graph logic are
 * one code path, tested in CI on `host` and on the GPU on `cuda`.
 *
 * The host backend enforces CUDA's rules instead of being permissive: what CUDA rejects
 * during a capture, it rejects (and invalidates the capture), and a fault is sticky.
 *
 * Conventions for implementations:
 * - Every slot returns recap_status and records a detail message on failure (RECAP_FAIL or
 *   the RECAP_CUDA_TRY family), naming the call.
 * - Slots marked (optional) may be NULL; the runtime then answers RECAP_STATUS_NOT_SUPPORTED.
 * - Objects (recap_stream, recap_event) are allocated by the runtime; the backend fills and
 *   reads their `native` member only.
 */
#ifndef RECAP_RUNTIME_BACKEND_H
#define RECAP_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct recap__backend recap__backend;

struct recap_stream {
  recap_device device;
  const recap__backend *backend;
  void *native; /* cudaStream_t, or the host backend's stream */
  int priority;
  unsigned flags;
  bool owns_native; /* false for wrapped external streams */
};

struct recap_event {
  recap_device device;
  const recap__backend *backend;
  void *native; /* cudaEvent_t, or the host backend's event */
  unsigned flags;
};

/* A captured graph and its instantiation, opaque to everything but the backend. */
typedef struct recap__graph recap__graph;
typedef struct recap__graph_exec recap__graph_exec;

/* A function the host backend runs as a "kernel". It returns RECAP_OK, or an error that
 * becomes a sticky device fault (as a trapped kernel does on CUDA). */
typedef recap_status (*recap__host_fn)(void *args);

struct recap__backend {
  const char *name;
  recap_backend_kind kind;

  /* Devices. */
  recap_status (*device_count)(int *count);
  recap_status (*device_properties)(int device, recap_device_properties *out);
  recap_status (*mem_get_info)(int device, size_t *free_bytes, size_t *total_bytes);
  recap_status (*device_synchronize)(int device);
  recap_status (*can_access_peer)(int device, int peer, int *out);
  const char *(*compiled_archs)(void);

  /* Raw device memory: the allocator's lowest level. mem_alloc during a capture follows
   * CUDA's rules for the calling thread's capture interaction mode. */
  recap_status (*mem_alloc)(int device, size_t bytes, void **out);
  recap_status (*mem_free)(int device, void *ptr);
  /* Stream-ordered copies and fills; pointers may be device or host memory. */
  recap_status (*memcpy_async)(void *dst, const void *src, size_t bytes, recap_stream *stream);
  recap_status (*memset_async)(void *dst, int value, size_t bytes, recap_stream *stream);

  /* Streams. stream_create fills stream->native (priority already clamped by
   * stream_priority_range). */
  recap_status (*stream_priority_range)(int device, int *least, int *greatest);
  recap_status (*stream_create)(recap_stream *stream);
  recap_status (*stream_destroy)(recap_stream *stream);
  recap_status (*stream_query)(recap_stream *stream);
  recap_status (*stream_synchronize)(recap_stream *stream);
  recap_status (*stream_wait_event)(recap_stream *stream, recap_event *event);
  recap_status (*stream_capture_status)(recap_stream *stream, recap_capture_status *out);
  /* Whether a stream wraps an external native stream (wrap_external) (optional). */
  recap_status (*stream_wrap)(recap_stream *stream, void *native);

  /* Events. */
  recap_status (*event_create)(recap_event *event);
  recap_status (*event_destroy)(recap_event *event);
  recap_status (*event_record)(recap_event *event, recap_stream *stream);
  recap_status (*event_query)(recap_event *event);
  recap_status (*event_synchronize)(recap_event *event);
  recap_status (*event_elapsed_ms)(recap_event *start, recap_event *end, float *out_ms);
  recap_status (*event_ipc_handle)(recap_event *event, recap_ipc_event_handle *out); /* (optional) */
  recap_status (*event_ipc_open)(recap_event *event, const recap_ipc_event_handle *handle); /* (optional) */
  /* A caller's native stream (any handle, implicit streams included) records or waits on an
   * event of this backend (optional: a backend without native streams). */
  recap_status (*event_record_native)(recap_event *event, void *native_stream); /* (optional) */
  recap_status (*native_stream_wait_event)(void *native_stream,
                                           recap_event *event); /* (optional) */

  /* Stream capture and graphs. capture_end returns the captured graph, or an error
   * (RECAP_STATUS_CAPTURE_INVALIDATED naming the illegal call) after which the capture is
   * over and nothing needs releasing. */
  recap_status (*capture_begin)(recap_stream *stream, recap_capture_mode mode);
  recap_status (*capture_end)(recap_stream *stream, recap__graph **out);
  /* Sets the calling thread's capture interaction mode and returns the previous one
   * (cudaThreadExchangeStreamCaptureMode). */
  recap_status (*exchange_capture_mode)(recap_capture_mode *mode);
  recap_status (*graph_node_count)(recap__graph *graph, size_t *out);
  recap_status (*graph_instantiate)(recap__graph *graph, recap__graph_exec **out);
  /* Updates `exec` in place to `graph`'s parameters; RECAP_STATUS_NOT_SUPPORTED when the
   * topology differs (the caller then re-instantiates). */
  recap_status (*graph_exec_update)(recap__graph_exec *exec, recap__graph *graph);
  recap_status (*graph_upload)(recap__graph_exec *exec, recap_stream *stream);
  recap_status (*graph_launch)(recap__graph_exec *exec, recap_stream *stream);
  void (*graph_destroy)(recap__graph *graph);
  void (*graph_exec_destroy)(recap__graph_exec *exec);
  /* Writes a Graphviz description of the graph (optional). */
  recap_status (*graph_debug_dot)(recap__graph *graph, const char *path);

  /* Makes `device` the calling thread's current native device for the launches that follow
   * (CUDA's <<<...>>> launches, and libraries such as NCCL, go to the current device, which must
   * be the stream's), saving the previous one in *previous for device_exit (optional: a
   * backend without a native current device leaves both NULL). */
  recap_status (*device_enter)(int device, int *previous);
  void (*device_exit)(int device, int previous);

  /* Runs fn(args) in stream order; args (args_size bytes) are copied, so a captured call
   * keeps its own copy, as kernel parameters are. On CUDA this is cudaLaunchHostFunc. */
  recap_status (*launch_host)(recap_stream *stream, recap__host_fn fn, const void *args,
                              size_t args_size);
  /* As launch_host, for a host function that stands for a device kernel (the host backend's
   * ops): captured, it is a kernel node, which a WHILE body may hold, where launch_host's
   * host-function node is refused (optional: NULL on backends with real kernels). */
  recap_status (*launch_kernel)(recap_stream *stream, recap__host_fn fn, const void *args,
                                size_t args_size);

  /* Conditional WHILE loops inside a capture (optional: all three or none; NULL, or
   * RECAP_STATUS_NOT_SUPPORTED from while_begin, when the driver has no conditional nodes).
   *
   * while_begin adds a WHILE node at `stream`'s place in its capture (work the stream submits
   * later runs after the whole loop) and begins capturing the loop's body on `body`, a stream
   * of the same device that takes part in no capture, in `stream`'s capture mode. The node's
   * condition handle goes to *handle; it holds 1 at each launch of the node
   * (cudaGraphCondAssignDefault), and the body runs again after each iteration while it is
   * non-zero. Handles are created in call order, so two captures that make the same calls
   * produce graphs that graph_exec_update accepts.
   *
   * while_end ends the body's capture. The body may hold only kernel, empty, memcpy, memset,
   * child-graph and conditional nodes, and copy or fill only device memory or memory from
   * host_alloc_mapped (CUDA's rules for conditional bodies): a violation invalidates the
   * capture, naming the rule; while_end then returns RECAP_STATUS_CAPTURE_INVALIDATED and the
   * enclosing capture is invalidated too. The enclosing capture cannot end before its bodies.
   *
   * condition_set records on `stream` (capturing a body) a kernel that copies the device int
   * at `flag` into the handle's value when it runs: the last one to run in an iteration
   * decides whether another follows. */
  recap_status (*while_begin)(recap_stream *stream, recap_stream *body, uint64_t *handle);
  recap_status (*while_end)(recap_stream *body);
  recap_status (*condition_set)(recap_stream *stream, uint64_t handle, const int32_t *flag);
  /* For a backend whose kernels are host functions (launch_kernel): what such a kernel calls
   * to set a WHILE node's condition itself, as a CUDA kernel calls cudaGraphSetConditional,
   * so a body's last kernel can decide the next iteration without a condition_set node after
   * it. The innermost WHILE node with `handle` running on the calling thread gets `value`;
   * outside that node's body it fails (a fault), as cudaGraphSetConditional does. NULL on
   * CUDA, whose kernels call cudaGraphSetConditional. */
  recap_status (*condition_store)(uint64_t handle, int32_t value);

  /* Page-locked host memory mapped into the device's address space (cudaHostAlloc with
   * cudaHostAllocMapped under unified addressing): one pointer that host code and kernels both
   * use, and that a WHILE body may copy to or from. Zeroed. host_free_mapped(NULL) does
   * nothing. */
  recap_status (*host_alloc_mapped)(int device, size_t bytes, void **out);
  recap_status (*host_free_mapped)(int device, void *ptr);
};

/* The backend for a kind; NULL (with a message) when it is not compiled in. */
const recap__backend *recap__backend_get(recap_backend_kind kind);

extern const recap__backend recap__host_backend;
#if RECAP_WITH_CUDA
extern const recap__backend recap__cuda_backend;
#endif

/* Checks that `device` names an existing device and returns its backend. */
recap_status recap__device_backend(recap_device device, const recap__backend **out);

#ifdef __cplusplus
}
#endif

#endif
