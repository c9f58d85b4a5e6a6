/*
 * poll.h: how a wait that polls (a stream under the watchdog, a non-blocking NCCL call that
 * answered ncclInProgress) paces its polls (internal to recap; comm/nccl.c).
 *
 * By time waited, not by polls made: a distributed decode step is a wait of a few
 * milliseconds on every rank, every step. Counting polls let such a wait fall into 10 us
 * sleeps after 200 quick polls (well under a millisecond), and a 10 us nanosleep lasts about
 * 60 us under Linux's default timer slack, so each rank noticed the end of its step up to
 * ~60 us late, on every token (TP 1's plain stream synchronize spins instead). So: spin, as
 * cudaStreamSynchronize does by default, for the first RECAP__POLL_SPIN_US of a wait, then
 * back off to 100 us and, past a second, to 1 ms for waits on a slow or dead peer.
 *
 *   double start = now_us();
 *   while (!done()) { long us = recap__poll_pause_us(now_us() - start); if (us) sleep_us(us); }
 */
#ifndef RECAP_COMM_POLL_H
#define RECAP_COMM_POLL_H

enum {
  RECAP__POLL_SPIN_US = 20000,  /* longer than any decode step */
  RECAP__POLL_SLOW_US = 1000000 /* a peer this late is slow or dead: poll every millisecond */
};

/* Microseconds to sleep before the next poll of a wait that began waited_us ago. */
static inline long recap__poll_pause_us(double waited_us) {
  if (waited_us < RECAP__POLL_SPIN_US) return 0;
  return waited_us < RECAP__POLL_SLOW_US ? 100 : 1000;
}

#endif
