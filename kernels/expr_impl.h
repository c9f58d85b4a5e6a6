/*
 * expr_impl.h: the expression program's representation, shared by the expr*.c files and
 * expr.cu (internal to kernels/; everyone else goes through kernels/expr.h).
 */
#ifndef RECAP_KERNELS_EXPR_IMPL_H
#define RECAP_KERNELS_EXPR_IMPL_H

#include <pthread.h>

#include "kernels/expr.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compiled kernels of one (device, signature), a singly linked list hanging off the
 * program; defined and freed by the CUDA half (expr.cu). */
struct recap__expr_compiled;

struct recap__expr_program {
  int num_inputs;
  recap__expr_node_data *nodes;
  int count, capacity;
  int max_nodes, max_depth; /* the limits constructors enforce */
  recap__expr_node root;
  bool finished;
  /* The first constructor failure, kept with its message for finish to report. */
  recap_status error;
  char error_message[256];
  /* The nodes reachable from root, operands first: what evaluation and codegen visit. */
  int32_t *live;
  int num_live;
  /* Write-once cache of compiled kernels (expr.cu), guarded by `lock`. Whoever fills it sets
   * free_compiled with it, so that destroying a program never calls up into the CUDA half. */
  pthread_mutex_t lock;
  struct recap__expr_compiled *compiled;
  void (*free_compiled)(struct recap__expr_compiled *list);
};

/* Sets the program's limits (the parser lowers them to its own). */
void recap__expr_program_set_limits(recap__expr_program *p, int max_nodes, int max_depth);

/* Whether op is a parameterless unary function, a binary operator, or a comparison. */
bool recap__expr_is_unary_fn(recap__expr_op op);
bool recap__expr_is_binary(recap__expr_op op);

/* Rounds v to dtype's storage and back (CAST). */
float recap__expr_round_to(float v, recap_dtype dtype);

#ifdef __cplusplus
}
#endif

#endif
