/*
 * host_graph.h: the host (CPU) backend's captured graphs (internal).
 *
 * host_backend.c holds the device, memory, streams, events and stream capture, which records
 * into these graphs; host_graph.c holds the captured graph (a node list) and what can be done
 * with one without touching capture state: copy, run, compare topologies, update, count,
 * print. Both run host functions through host_fault.h, below them.
 *
 * A graph's nodes are stored in submission order and every dependency points to an earlier
 * node, so submission order is always a valid topological order: replay runs nodes in index
 * order. A node depends on at most two others: the previous node of its stream and, for an
 * event wait, the node that recorded the event. A WHILE node's body is a graph of its own,
 * run as a whole once per iteration (a conditional node's body graph on CUDA).
 *
 * Ownership: a graph owns its nodes, their argument copies and their child graphs; an exec
 * owns a deep copy of the graph it was instantiated from (so the caller may destroy the graph
 * right after instantiating, as with CUDA).
 */
#ifndef RECAP_RUNTIME_HOST_GRAPH_H
#define RECAP_RUNTIME_HOST_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "No node": a stream that has recorded nothing yet in its capture. */
#define RECAP__HOST_NO_NODE ((size_t)-1)

typedef enum {
  RECAP__HOST_NODE_HOST_FN,      /* launch_host: fn(copy of args) */
  RECAP__HOST_NODE_MEMCPY,       /* memcpy_async */
  RECAP__HOST_NODE_MEMSET,       /* memset_async */
  RECAP__HOST_NODE_EVENT_RECORD, /* event_record: ordering only, runs nothing */
  RECAP__HOST_NODE_EVENT_WAIT,   /* stream_wait_event: ordering only, runs nothing */
  RECAP__HOST_NODE_CHILD,        /* graph_launch on a capturing stream: a whole graph */
  RECAP__HOST_NODE_WHILE,        /* while_begin: runs its body while its condition is set */
} recap__host_node_kind;

typedef struct {
  recap__host_node_kind kind;
  size_t deps[2];
  int dep_count;
  union {
    struct {
      recap__host_fn fn;
      void *args; /* owned copy; NULL when args_size is 0 */
      size_t args_size;
      bool kernel; /* launch_kernel (stands for a device kernel), not launch_host */
    } host;
    struct {
      void *dst;
      const void *src;
      size_t bytes;
    } copy;
    struct {
      void *dst;
      int value;
      size_t bytes;
    } fill;
    recap__graph *child; /* owned */
    struct {
      recap__graph *body; /* owned */
      uint64_t handle;
    } loop;
  } u;
} recap__host_node;

struct recap__graph {
  recap__host_node *nodes;
  size_t count;
  size_t capacity;
};

struct recap__graph_exec {
  recap__graph graph;
};

/* An empty graph; NULL (with a message) when out of memory. */
recap__graph *recap__host_graph_new(void);
/* Appends *node (its deps must name earlier nodes) and takes ownership of its args and
 * child on success; on failure (out of memory) the caller still owns them. */
recap_status recap__host_graph_append(recap__graph *graph, const recap__host_node *node,
                                      size_t *index);
/* Releases what one node owns (used for a node that could not be appended). */
void recap__host_node_release(recap__host_node *node);
/* Deep copy of src into *dst (which must be empty). On failure *dst is left empty. */
recap_status recap__host_graph_copy(const recap__graph *src, recap__graph *dst);
/* Whether node `ancestor` is node `node` or one of its transitive dependencies. Needs a
 * scratch allocation: RECAP_STATUS_OUT_OF_MEMORY if it fails. */
recap_status recap__host_graph_reaches(const recap__graph *graph, size_t node, size_t ancestor,
                                       bool *out);
/* Runs every node in index order on the calling thread; stops at the first failure. A WHILE
 * node sets its condition to 1, then runs its body until the condition reads 0. */
recap_status recap__host_graph_run(const recap__graph *graph);

/* The kernel that condition_set records: args are a recap__host_condition. It sets the
 * condition of the innermost running WHILE node with that handle to *flag; run anywhere
 * else it fails (a fault), as cudaGraphSetConditional outside its node's graph does. */
typedef struct {
  uint64_t handle;
  const int32_t *flag;
} recap__host_condition;
recap_status recap__host_condition_set_fn(void *args);
/* The backend's condition_store: sets that node's condition to `value` (see backend.h). */
recap_status recap__host_condition_store(uint64_t handle, int32_t value);

/* The backend's graph slots (see backend.h). */
recap_status recap__host_graph_node_count(recap__graph *graph, size_t *out);
recap_status recap__host_graph_instantiate(recap__graph *graph, recap__graph_exec **out);
recap_status recap__host_graph_exec_update(recap__graph_exec *exec, recap__graph *graph);
void recap__host_graph_destroy(recap__graph *graph);
void recap__host_graph_exec_destroy(recap__graph_exec *exec);
recap_status recap__host_graph_debug_dot(recap__graph *graph, const char *path);

#ifdef __cplusplus
}
#endif

#endif
