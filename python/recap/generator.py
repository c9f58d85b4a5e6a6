"""recap.Generator: token generation over a paged serving spec (recap_generator_*)."""
import ctypes
import os
import threading
import time

from ._native import (INT32_MAX, UINT64_MAX, GeneratorOptions, GeneratorStats, RecapError,
                      Request, RequestStatus, check, checked_int, create_on_host_without_gpu,
                      lib)
from .pipeline import _parse_device

STATES = ["waiting", "running", "finished", "cancelled", "failed"]
FINISH = ["none", "max_tokens", "stop", "length"]
_TIMEOUT = -14  # RECAP_STATUS_TIMEOUT: wait's "not yet", not a failure
_WAIT_SLICE = 0.05  # seconds: wait() checks between slices whether close() was called
_INT32 = (-INT32_MAX - 1, INT32_MAX)


class RequestState:
    """poll()'s answer: state ("waiting", "running", "finished", "cancelled", "failed"),
    finish ("none", "max_tokens", "stop", "length"), tokens so far, seed, preemptions,
    ttft_ms, and error (the engine's recap_status when failed, else 0)."""

    def __init__(self, status, tokens):
        self.state, self.finish = STATES[status.state], FINISH[status.finish]
        self.tokens, self.seed, self.preemptions = tokens, status.seed, status.preemptions
        self.ttft_ms, self.error = status.ttft_ms, status.error

    @property
    def done(self):
        return self.state in ("finished", "cancelled", "failed")


def _request(prompt, max_new_tokens, temperature, top_k, top_p, min_p, seed, stop_ids):
    """A recap_request over the arguments; its arrays ride along on the struct (kept alive with
    it) because the struct only points at them."""
    # Integers in the C fields' ranges (ctypes would wrap the others silently); what they mean
    # (an id inside the vocabulary, max_new_tokens >= 1, ...) recap checks and names.
    prompt = [checked_int("prompt[%d]" % i, t, *_INT32) for i, t in enumerate(prompt)]
    stop_ids = [checked_int("stop_ids[%d]" % i, t, *_INT32) for i, t in enumerate(stop_ids)]
    r = Request()
    r.struct_size = ctypes.sizeof(Request)
    r._prompt = (ctypes.c_int32 * len(prompt))(*prompt)
    r._stop_ids = (ctypes.c_int32 * len(stop_ids))(*stop_ids)
    r.prompt, r.prompt_len = r._prompt, len(prompt)
    r.max_new_tokens = checked_int("max_new_tokens", max_new_tokens, *_INT32)
    r.temperature, r.top_p, r.min_p = temperature, top_p, min_p
    r.top_k = checked_int("top_k", top_k, *_INT32)
    if seed is not None:
        r.has_seed, r.seed = 1, checked_int("seed", seed, 0, UINT64_MAX)
    r.stop_ids, r.num_stop_ids = r._stop_ids, len(stop_ids)
    return r


def check_request(prompt, max_new_tokens, vocab, max_seq, *, temperature=0.0, top_k=0,
                  top_p=0.0, min_p=0.0, seed=None, stop_ids=()):
    """Checks a request as Generator.submit would for a model of `vocab` tokens and `max_seq`
    positions (recap_request_check), with no generator: raises RecapError naming the field
    (an empty prompt, a token outside the vocabulary, max_new_tokens 0 or past max_seq, ...);
    whether the KV pool can ever hold it is the generator's own check, at submit."""
    r = _request(prompt, max_new_tokens, temperature, top_k, top_p, min_p, seed, stop_ids)
    check(lib().recap_request_check(ctypes.byref(r), vocab, max_seq), "recap_request_check")


class Generator:
    """A generator over a paged serving spec (`recap import-hf DIR -o SPEC --paged`): it loads
    the spec, sizes the KV pool, captures, and runs requests on its own engine thread.
    Every method is safe from any thread; close() waits for the calls in progress (a wait()
    notices within 50 ms and raises ValueError: the generator is closed)."""

    def __init__(self, spec_path, *, device=None, kv_bytes=0, kv_fraction=0.0, max_running=0,
                 prefill_budget=0, eager=False, quiet=True):
        self._handle = None
        self._calls = 0  # methods inside librecap now; close() waits for them
        self._closing = False
        self._idle = threading.Condition()
        opts = GeneratorOptions()
        opts.struct_size = ctypes.sizeof(GeneratorOptions)
        opts.kv_bytes = checked_int("kv_bytes", kv_bytes, 0, UINT64_MAX)
        opts.kv_fraction = kv_fraction
        opts.max_running = checked_int("max_running", max_running, *_INT32)
        opts.prefill_budget = checked_int("prefill_budget", prefill_budget, *_INT32)
        opts.eager, opts.quiet = int(eager), int(quiet)
        if device is not None:
            opts.override_device, opts.device = 1, _parse_device(device)
        handle = ctypes.c_void_p()
        create_on_host_without_gpu(
            lambda o: lib().recap_generator_create(os.fsencode(spec_path), ctypes.byref(o),
                                                   ctypes.byref(handle)),
            opts, "recap_generator_create")
        self._handle = handle.value

    def close(self):
        """Stops taking requests, cancels the rest and joins the engine thread, once the calls
        other threads are making have returned."""
        with self._idle:
            if not self._handle or self._closing:
                return
            self._closing = True
            while self._calls:
                self._idle.wait()
            handle, self._handle = self._handle, None
        check(lib().recap_generator_destroy(handle), "recap_generator_destroy")

    def _call(self, fn, *args):
        """fn(handle, *args) with the generator held open for the call's length."""
        with self._idle:
            if not self._handle or self._closing:
                raise ValueError("the generator is closed")
            self._calls += 1
            handle = self._handle
        try:
            return fn(handle, *args)
        finally:
            with self._idle:
                self._calls -= 1
                if not self._calls:
                    self._idle.notify_all()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def submit(self, prompt, max_new_tokens, *, temperature=0.0, top_k=0, top_p=0.0, min_p=0.0,
               seed=None, stop_ids=()):
        """Queues a request (token ids) and returns its id. temperature 0 is greedy; seed None
        lets the generator draw one (poll's seed says which)."""
        r = _request(prompt, max_new_tokens, temperature, top_k, top_p, min_p, seed, stop_ids)
        rid = ctypes.c_uint64()
        check(self._call(lib().recap_generator_submit, ctypes.byref(r), ctypes.byref(rid), None),
              "recap_generator_submit")
        return rid.value

    def poll(self, request_id):
        """The request's state and every token it has produced so far."""
        request_id = checked_int("request_id", request_id, 0, UINT64_MAX)
        status = RequestStatus()
        check(self._call(lib().recap_generator_poll, request_id, None, 0, ctypes.byref(status)),
              "recap_generator_poll")
        # A second poll with room for them all: the count can only have grown in between.
        tokens = (ctypes.c_int32 * max(status.num_tokens, 1))()
        check(self._call(lib().recap_generator_poll, request_id, tokens, status.num_tokens,
                         ctypes.byref(status)), "recap_generator_poll")
        return RequestState(status, list(tokens[:min(status.num_tokens, len(tokens))]))

    def wait(self, request_id, timeout=None):
        """Waits until the request ends; False when `timeout` seconds passed first. Waits in
        slices, so that close() from another thread ends it (ValueError) rather than freeing
        the generator under it."""
        request_id = checked_int("request_id", request_id, 0, UINT64_MAX)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = _WAIT_SLICE if deadline is None else max(0.0, deadline - time.monotonic())
            st = self._call(lib().recap_generator_wait, request_id, min(left, _WAIT_SLICE))
            if st != _TIMEOUT:
                check(st, "recap_generator_wait")
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def stream(self, request_id, interval=0.01):
        """Yields the request's tokens as they come (polled every `interval` seconds at most),
        then returns; raises RecapError if the engine failed it."""
        sent = 0
        while True:
            ended = self.wait(request_id, interval)
            state = self.poll(request_id)
            yield from state.tokens[sent:]
            sent = len(state.tokens)
            if state.state == "failed":
                raise RecapError(state.error, lib().recap_status_name(state.error).decode(),
                                 "the engine failed request %d (its detail went to stderr)"
                                 % request_id, "recap_generator_poll")
            if ended and state.done:
                return

    def stats(self):
        """The generator's counters as a dict (recap_generator_stats: steps, prefill_steps,
        decode_steps, graph_steps, eager_steps, submitted, finished, cancelled, preemptions,
        tokens_out, kv_blocks, kv_blocks_used, block_size, running, waiting, ready_ms,
        loop_launches, loop_steps, kv_blocks_peak): what a server exports as metrics."""
        out = GeneratorStats()
        check(self._call(lib().recap_generator_stats_get, ctypes.byref(out)),
              "recap_generator_stats_get")
        return {name: getattr(out, name) for name, _ in GeneratorStats._fields_}

    def cancel(self, request_id):
        """Ends a request; its tokens so far stay readable until release(). The engine takes
        it out at its next step: poll() says "cancelled" from then on (wait() returns). An
        unknown or ended id is harmless (nothing happens), as in recap_generator_cancel."""
        request_id = checked_int("request_id", request_id, 0, UINT64_MAX)
        check(self._call(lib().recap_generator_cancel, request_id), "recap_generator_cancel")

    def release(self, request_id):
        """Forgets an ended request (cancelling it first if it is still going); an unknown id is
        harmless."""
        request_id = checked_int("request_id", request_id, 0, UINT64_MAX)
        check(self._call(lib().recap_generator_release, request_id), "recap_generator_release")

    def generate(self, prompt, max_new_tokens, **sampling):
        """submit, wait, poll and release in one call: the new token ids."""
        rid = self.submit(prompt, max_new_tokens, **sampling)
        try:
            return list(self.stream(rid))
        finally:
            self.release(rid)
