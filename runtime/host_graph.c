/* host_graph.c: the host backend's captured graphs and instantiated execs (see host_graph.h). */
#include "runtime/host_graph.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/host_fault.h"

static const char *kind_name(recap__host_node_kind kind) {
  switch (kind) {
    case RECAP__HOST_NODE_HOST_FN:
      return "host function";
    case RECAP__HOST_NODE_MEMCPY:
      return "memcpy";
    case RECAP__HOST_NODE_MEMSET:
      return "memset";
    case RECAP__HOST_NODE_EVENT_RECORD:
      return "event record";
    case RECAP__HOST_NODE_EVENT_WAIT:
      return "event wait";
    case RECAP__HOST_NODE_CHILD:
      return "child graph";
    case RECAP__HOST_NODE_WHILE:
      return "WHILE conditional";
  }
  return "unknown";
}

recap__graph *recap__host_graph_new(void) {
  recap__graph *graph = calloc(1, sizeof *graph);
  if (!graph) recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a host graph");
  return graph;
}

static void graph_clear(recap__graph *graph) {
  for (size_t i = 0; i < graph->count; i++) recap__host_node_release(&graph->nodes[i]);
  free(graph->nodes);
  graph->nodes = NULL;
  graph->count = graph->capacity = 0;
}

void recap__host_node_release(recap__host_node *node) {
  if (node->kind == RECAP__HOST_NODE_HOST_FN) {
    free(node->u.host.args);
    node->u.host.args = NULL;
  } else if (node->kind == RECAP__HOST_NODE_CHILD) {
    recap__host_graph_destroy(node->u.child);
    node->u.child = NULL;
  } else if (node->kind == RECAP__HOST_NODE_WHILE) {
    recap__host_graph_destroy(node->u.loop.body);
    node->u.loop.body = NULL;
  }
}

recap_status recap__host_graph_append(recap__graph *graph, const recap__host_node *node,
                                      size_t *index) {
  for (int d = 0; d < node->dep_count; d++)
    if (node->deps[d] >= graph->count)
      return RECAP_FAIL(RECAP_STATUS_INTERNAL, "node dependency %zu is not an earlier node",
                        node->deps[d]);
  if (graph->count == graph->capacity) {
    size_t capacity = graph->capacity ? graph->capacity * 2 : 16;
    recap__host_node *nodes = realloc(graph->nodes, capacity * sizeof *nodes);
    if (!nodes)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to record graph node %zu",
                        graph->count);
    graph->nodes = nodes;
    graph->capacity = capacity;
  }
  graph->nodes[graph->count] = *node;
  *index = graph->count++;
  return RECAP_OK;
}

/* Deep copy of one node's owned parts into *dst (whose other fields are already set). */
static recap_status node_copy_owned(const recap__host_node *src, recap__host_node *dst) {
  if (src->kind == RECAP__HOST_NODE_HOST_FN && src->u.host.args_size > 0) {
    dst->u.host.args = malloc(src->u.host.args_size);
    if (!dst->u.host.args)
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to copy %zu argument bytes",
                        src->u.host.args_size);
    memcpy(dst->u.host.args, src->u.host.args, src->u.host.args_size);
  } else if (src->kind == RECAP__HOST_NODE_CHILD || src->kind == RECAP__HOST_NODE_WHILE) {
    bool loop = src->kind == RECAP__HOST_NODE_WHILE;
    recap__graph *copy = recap__host_graph_new();
    if (!copy) return RECAP_STATUS_OUT_OF_MEMORY;
    recap_status st = recap__host_graph_copy(loop ? src->u.loop.body : src->u.child, copy);
    if (st != RECAP_OK) {
      free(copy);
      copy = NULL;
    }
    if (loop)
      dst->u.loop.body = copy;
    else
      dst->u.child = copy;
    return st;
  }
  return RECAP_OK;
}

recap_status recap__host_graph_copy(const recap__graph *src, recap__graph *dst) {
  if (src->count == 0) return RECAP_OK;
  dst->nodes = calloc(src->count, sizeof *dst->nodes);
  if (!dst->nodes)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to copy a graph of %zu nodes",
                      src->count);
  dst->capacity = src->count;
  for (size_t i = 0; i < src->count; i++) {
    dst->nodes[i] = src->nodes[i];
    recap_status st = node_copy_owned(&src->nodes[i], &dst->nodes[i]);
    if (st != RECAP_OK) {
      graph_clear(dst); /* releases the i nodes already copied */
      return st;
    }
    dst->count = i + 1;
  }
  return RECAP_OK;
}

recap_status recap__host_graph_reaches(const recap__graph *graph, size_t node, size_t ancestor,
                                       bool *out) {
  if (node >= graph->count || ancestor >= graph->count || ancestor > node) {
    *out = false;
    return RECAP_OK;
  }
  /* Dependencies always point to lower indices, so one downward sweep from `node` marks
   * everything it depends on. */
  unsigned char *reached = calloc(node + 1, 1);
  if (!reached)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to walk a graph of %zu nodes",
                      graph->count);
  reached[node] = 1;
  for (size_t i = node + 1; i-- > ancestor;) {
    if (!reached[i]) continue;
    for (int d = 0; d < graph->nodes[i].dep_count; d++) reached[graph->nodes[i].deps[d]] = 1;
  }
  *out = reached[ancestor] != 0;
  free(reached);
  return RECAP_OK;
}

/* The WHILE nodes running on this thread, innermost first: a replay runs on its caller's
 * thread, so a condition kernel finds its loop here (each exec has its own conditions, as on
 * CUDA, since nothing about them is stored in the graph). */
typedef struct loop_frame {
  uint64_t handle;
  int32_t value;
  struct loop_frame *outer;
} loop_frame;
static _Thread_local loop_frame *running_loops;

recap_status recap__host_condition_store(uint64_t handle, int32_t value) {
  for (loop_frame *f = running_loops; f; f = f->outer) {
    if (f->handle != handle) continue;
    f->value = value;
    return RECAP_OK;
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "a kernel set the condition of handle %ju outside that handle's WHILE node "
                    "(cudaGraphSetConditional outside its conditional node's graph)",
                    (uintmax_t)handle);
}

recap_status recap__host_condition_set_fn(void *args) {
  const recap__host_condition *c = args;
  return recap__host_condition_store(c->handle, *c->flag);
}

static recap_status run_loop(const recap__host_node *n) {
  loop_frame frame = {.handle = n->u.loop.handle, .value = 1, .outer = running_loops};
  running_loops = &frame;
  recap_status st = RECAP_OK;
  while (st == RECAP_OK && frame.value != 0) st = recap__host_graph_run(n->u.loop.body);
  running_loops = frame.outer;
  return st;
}

recap_status recap__host_graph_run(const recap__graph *graph) {
  for (size_t i = 0; i < graph->count; i++) {
    const recap__host_node *n = &graph->nodes[i];
    switch (n->kind) {
      case RECAP__HOST_NODE_HOST_FN:
        RECAP_TRY(recap__host_run_fn(n->u.host.fn, n->u.host.args, n->u.host.args_size));
        break;
      case RECAP__HOST_NODE_MEMCPY:
        memmove(n->u.copy.dst, n->u.copy.src, n->u.copy.bytes);
        break;
      case RECAP__HOST_NODE_MEMSET:
        memset(n->u.fill.dst, n->u.fill.value, n->u.fill.bytes);
        break;
      case RECAP__HOST_NODE_EVENT_RECORD:
      case RECAP__HOST_NODE_EVENT_WAIT:
        /* Replay is in index order on one thread, so ordering nodes have nothing to do;
         * they never touch the event either, which may be destroyed once captured. */
        break;
      case RECAP__HOST_NODE_CHILD:
        RECAP_TRY(recap__host_graph_run(n->u.child));
        break;
      case RECAP__HOST_NODE_WHILE:
        RECAP_TRY(run_loop(n));
        break;
    }
  }
  return RECAP_OK;
}

/* Work nodes only: ordering nodes are not kernels, and CUDA records no node for an event
 * record or wait inside a capture either. A child graph counts the work nodes it holds, so
 * "the capture recorded nothing" reads the same however the work was launched. */
static size_t work_node_count(const recap__graph *graph) {
  size_t count = 0;
  for (size_t i = 0; i < graph->count; i++) {
    switch (graph->nodes[i].kind) {
      case RECAP__HOST_NODE_HOST_FN:
      case RECAP__HOST_NODE_MEMCPY:
      case RECAP__HOST_NODE_MEMSET:
        count++;
        break;
      case RECAP__HOST_NODE_CHILD:
        count += work_node_count(graph->nodes[i].u.child);
        break;
      case RECAP__HOST_NODE_WHILE: /* the conditional node and what its body holds */
        count += 1 + work_node_count(graph->nodes[i].u.loop.body);
        break;
      case RECAP__HOST_NODE_EVENT_RECORD:
      case RECAP__HOST_NODE_EVENT_WAIT:
        break;
    }
  }
  return count;
}

recap_status recap__host_graph_node_count(recap__graph *graph, size_t *out) {
  RECAP_CHECK_ARG(graph && out);
  RECAP_TRY(recap__host_check_fault());
  *out = work_node_count(graph);
  return RECAP_OK;
}

recap_status recap__host_graph_instantiate(recap__graph *graph, recap__graph_exec **out) {
  RECAP_CHECK_ARG(graph && out);
  RECAP_TRY(recap__host_check_fault());
  recap__graph_exec *exec = calloc(1, sizeof *exec);
  if (!exec) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a graph exec");
  recap_status st = recap__host_graph_copy(graph, &exec->graph);
  if (st != RECAP_OK) {
    free(exec);
    return st;
  }
  *out = exec;
  return RECAP_OK;
}

/* RECAP_OK when `to` can take `from`'s parameters in place: same nodes, kinds, edges, host
 * functions and argument sizes (cudaGraphExecUpdate's rule: only parameters may change).
 * `path` names the child graph being compared, for the message. */
static recap_status same_topology(const recap__graph *to, const recap__graph *from,
                                  const char *path) {
  if (to->count != from->count)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "graph topology differs%s: the exec has %zu nodes, the graph %zu", path,
                      to->count, from->count);
  for (size_t i = 0; i < to->count; i++) {
    const recap__host_node *a = &to->nodes[i], *b = &from->nodes[i];
    if (a->kind != b->kind)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "graph topology differs%s: node %zu is a %s in the exec but a %s in "
                        "the graph",
                        path, i, kind_name(a->kind), kind_name(b->kind));
    bool same_edges = a->dep_count == b->dep_count;
    for (int d = 0; same_edges && d < a->dep_count; d++) same_edges = a->deps[d] == b->deps[d];
    if (!same_edges)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "graph topology differs%s: node %zu (%s) has other dependencies", path, i,
                        kind_name(a->kind));
    if (a->kind == RECAP__HOST_NODE_HOST_FN &&
        (a->u.host.fn != b->u.host.fn || a->u.host.args_size != b->u.host.args_size ||
         a->u.host.kernel != b->u.host.kernel))
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "graph topology differs%s: node %zu calls another host function or "
                        "takes another argument size (%zu vs %zu bytes)",
                        path, i, a->u.host.args_size, b->u.host.args_size);
    if (a->kind == RECAP__HOST_NODE_CHILD) {
      char child_path[128];
      snprintf(child_path, sizeof child_path, "%s in child graph node %zu", path, i);
      RECAP_TRY(same_topology(a->u.child, b->u.child, child_path));
    }
    if (a->kind == RECAP__HOST_NODE_WHILE) {
      char body_path[128];
      snprintf(body_path, sizeof body_path, "%s in the body of WHILE node %zu", path, i);
      RECAP_TRY(same_topology(a->u.loop.body, b->u.loop.body, body_path));
    }
  }
  return RECAP_OK;
}

/* Copies parameters node by node; only called once same_topology has passed, so it cannot
 * fail (argument buffers already have the right size). */
static void copy_parameters(recap__graph *to, const recap__graph *from) {
  for (size_t i = 0; i < to->count; i++) {
    recap__host_node *a = &to->nodes[i];
    const recap__host_node *b = &from->nodes[i];
    switch (a->kind) {
      case RECAP__HOST_NODE_HOST_FN:
        if (a->u.host.args_size > 0) memcpy(a->u.host.args, b->u.host.args, a->u.host.args_size);
        break;
      case RECAP__HOST_NODE_MEMCPY:
        a->u.copy = b->u.copy;
        break;
      case RECAP__HOST_NODE_MEMSET:
        a->u.fill = b->u.fill;
        break;
      case RECAP__HOST_NODE_CHILD:
        copy_parameters(a->u.child, b->u.child);
        break;
      case RECAP__HOST_NODE_WHILE:
        /* The handle travels with the condition kernels' arguments, which are copied too, so
         * the exec's loop and its kernels keep naming one handle. */
        a->u.loop.handle = b->u.loop.handle;
        copy_parameters(a->u.loop.body, b->u.loop.body);
        break;
      case RECAP__HOST_NODE_EVENT_RECORD:
      case RECAP__HOST_NODE_EVENT_WAIT:
        break;
    }
  }
}

recap_status recap__host_graph_exec_update(recap__graph_exec *exec, recap__graph *graph) {
  RECAP_CHECK_ARG(exec && graph);
  RECAP_TRY(recap__host_check_fault());
  /* Check everything before changing anything, so a refused update leaves the exec as it
   * was (the caller falls back to re-instantiating). */
  RECAP_TRY(same_topology(&exec->graph, graph, ""));
  copy_parameters(&exec->graph, graph);
  return RECAP_OK;
}

void recap__host_graph_destroy(recap__graph *graph) {
  if (!graph) return;
  graph_clear(graph);
  free(graph);
}

void recap__host_graph_exec_destroy(recap__graph_exec *exec) {
  if (!exec) return;
  graph_clear(&exec->graph);
  free(exec);
}

static void dot_label(FILE *f, const recap__host_node *n) {
  switch (n->kind) {
    case RECAP__HOST_NODE_HOST_FN:
      fprintf(f, "host fn 0x%jx\\n%zu B args", (uintmax_t)(uintptr_t)n->u.host.fn,
              n->u.host.args_size);
      break;
    case RECAP__HOST_NODE_MEMCPY:
      fprintf(f, "memcpy %zu B\\n%p -> %p", n->u.copy.bytes, n->u.copy.src, n->u.copy.dst);
      break;
    case RECAP__HOST_NODE_MEMSET:
      fprintf(f, "memset %zu B = 0x%02x\\n%p", n->u.fill.bytes, n->u.fill.value & 0xff,
              n->u.fill.dst);
      break;
    case RECAP__HOST_NODE_EVENT_RECORD:
    case RECAP__HOST_NODE_EVENT_WAIT:
      fputs(kind_name(n->kind), f);
      break;
    case RECAP__HOST_NODE_CHILD:
      fprintf(f, "child graph\\n%zu nodes", n->u.child->count);
      break;
    case RECAP__HOST_NODE_WHILE:
      fprintf(f, "WHILE handle %ju\\nbody of %zu nodes", (uintmax_t)n->u.loop.handle,
              n->u.loop.body->count);
      break;
  }
}

recap_status recap__host_graph_debug_dot(recap__graph *graph, const char *path) {
  RECAP_CHECK_ARG(graph && path);
  RECAP_TRY(recap__host_check_fault());
  FILE *f = fopen(path, "w");
  if (!f) return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot open '%s': %s", path, strerror(errno));
  fprintf(f, "digraph recap_host_graph {\n  node [shape=box];\n");
  for (size_t i = 0; i < graph->count; i++) {
    fprintf(f, "  n%zu [label=\"%zu: ", i, i);
    dot_label(f, &graph->nodes[i]);
    fprintf(f, "\"];\n");
  }
  for (size_t i = 0; i < graph->count; i++)
    for (int d = 0; d < graph->nodes[i].dep_count; d++)
      fprintf(f, "  n%zu -> n%zu;\n", graph->nodes[i].deps[d], i);
  fprintf(f, "}\n");
  bool write_failed = ferror(f) != 0;
  if (fclose(f) != 0 || write_failed)
    return RECAP_FAIL(RECAP_STATUS_IO_ERROR, "cannot write '%s': %s", path, strerror(errno));
  return RECAP_OK;
}
