/*
 * peer_buffers.h: memory every rank of a communicator writes into directly, for the one-shot
 * all_reduce (kernels/collective.cu) (internal to recap; CUDA builds).
 *
 * Each rank allocates one receive buffer on its GPU and maps every other rank's: with CUDA IPC
 * handles exchanged over the communicator when the ranks are processes (peer_buffers.c,
 * recap__peer_buffers_open), with peer access when one process drives them all (an in-process
 * clique, recap__peer_buffers_link). A sum then costs one kernel per rank: each block writes its
 * slice of x into the same slot of every peer's buffer, as 8-byte words of 4 data bytes and a
 * 4-byte epoch (the store is one transaction, so a reader that sees the epoch sees the data:
 * no fence), waits for every peer's words of the same epoch in its own buffer, and adds them
 * in rank order, so every rank computes the same bits.
 *
 * Layout of one rank's buffer: [2 parities][world senders][RECAP__PEER_MAX_BLOCKS regions]
 * [RECAP__PEER_BLOCK_WORDS words]: block b of a call always uses region b. Block b's epoch is
 * counters[b] + 1 (this device's counter, stored back by the block), and its parity epoch & 1.
 * A rank's block b can be at most one epoch ahead of a peer's (it cannot finish epoch e before
 * the peer's block b wrote its words of epoch e), so writing epoch e + 1 into the other parity
 * never overwrites words the peer still waits for. Every rank runs the same calls with the same
 * grids, so block b's epochs agree without any shared counter or fence. Two calls must
 * therefore never run at the same time on one communicator: the engine keeps the one-shot path
 * to pipelines whose all_reduces share one stream (attrs.peer_buffers_off marks the rest), and
 * the ranks' calls run in one order.
 *
 * A peer that dies leaves a block waiting for its words: after a millisecond of waiting the
 * kernel also reads abort_word (pinned host memory, mapped), which the communicator's watchdog
 * sets when it aborts, and then returns without the sum.
 */
#ifndef RECAP_COMM_PEER_BUFFERS_H
#define RECAP_COMM_PEER_BUFFERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  /* The most ranks the one-shot all_reduce runs over (each block writes to every peer). */
  RECAP__PEER_MAX_WORLD = 8,
  /* The most blocks of one call: few enough to be resident together, since each waits for
   * its peers' blocks of the same index. */
  RECAP__PEER_MAX_BLOCKS = 64,
  /* The data words (4 bytes) of a block's region: a row of up to 8192 f16/bf16 elements. */
  RECAP__PEER_BLOCK_WORDS = 4096,
};

typedef struct recap__peer_view {
  int rank, world, device;
  /* Each rank's buffer as this device addresses it; peers[rank] is this rank's own. */
  void *peers[RECAP__PEER_MAX_WORLD];
  /* This device's, zeroed at creation: block b's last epoch, RECAP__PEER_MAX_BLOCKS of them. */
  uint32_t *counters;
  /* Nonzero once the communicator aborted: the device's view of a pinned host word. */
  const uint32_t *abort_word;
} recap__peer_view;

typedef struct recap__peer_buffers recap__peer_buffers;

/* The bytes of a CUDA IPC handle of this rank's buffer (cudaIpcMemHandle_t). */
enum { RECAP__PEER_HANDLE_BYTES = 64 };

/* Allocates this rank's buffer, counters and abort word on `device`, zeroed (rank of world,
 * world 2 .. RECAP__PEER_MAX_WORLD). */
recap_status recap__peer_buffers_create(int device, int rank, int world, recap__peer_buffers **out);
/* This rank's buffer's IPC handle, for the other processes. */
recap_status recap__peer_buffers_handle(const recap__peer_buffers *b, void *handle);
/* Maps rank `peer`'s buffer from its handle (another process's). */
recap_status recap__peer_buffers_open(recap__peer_buffers *b, int peer, const void *handle);
/* Links the buffers of an in-process clique (all[i] is rank i's, each on its own device):
 * enables peer access between every pair and points each at the others. */
recap_status recap__peer_buffers_link(recap__peer_buffers *const *all, int count);
/* What the kernel needs; valid while b lives. */
const recap__peer_view *recap__peer_buffers_view(const recap__peer_buffers *b);
/* Sets the abort word: waiting kernels return. */
void recap__peer_buffers_abort(recap__peer_buffers *b);
/* Unmaps the peers' buffers and frees this rank's (NULL: nothing). */
void recap__peer_buffers_destroy(recap__peer_buffers *b);

#ifdef __cplusplus
}
#endif

#endif
