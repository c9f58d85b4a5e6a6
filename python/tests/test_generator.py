"""recap.Generator on the host backend over the llama fixture (tests/data/models/llama),
imported as a paged serving spec by tests/python_test.sh, which names it in
RECAP_TEST_SERVE_SPEC; greedy tokens are compared with the fixture's expected.json."""
import json
import os
import threading
import time
import unittest

import recap

SPEC = os.environ.get("RECAP_TEST_SERVE_SPEC")


@unittest.skipUnless(SPEC, "RECAP_TEST_SERVE_SPEC is not set (tests/python_test.sh sets it)")
class GeneratorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The fixture's folder, as the spec names it: expected.json holds the prompt followed
        # by the reference (transformers') greedy tokens.
        with open(os.path.join(os.path.dirname(SPEC), "expected.json")) as f:
            expected = json.load(f)
        n = expected["prompt_length"]
        cls.prompt, cls.want = expected["tokens"][:n], expected["tokens"][n:]
        cls.g = recap.Generator(SPEC, device="host")

    @classmethod
    def tearDownClass(cls):
        cls.g.close()

    def test_greedy_tokens_match_the_reference(self):
        self.assertEqual(self.g.generate(self.prompt, len(self.want)), self.want)

    def test_stream_then_poll(self):
        rid = self.g.submit(self.prompt, len(self.want))
        self.assertEqual(list(self.g.stream(rid)), self.want)
        state = self.g.poll(rid)
        self.assertEqual((state.state, state.finish, state.tokens),
                         ("finished", "max_tokens", self.want))
        self.g.release(rid)
        with self.assertRaises(recap.RecapError):
            self.g.poll(rid)  # released: an unknown id

    def test_cancel(self):
        rid = self.g.submit(self.prompt, len(self.want))
        self.g.cancel(rid)
        self.assertTrue(self.g.wait(rid, 10.0))
        # It may have finished before the cancel arrived; either way it has ended.
        self.assertIn(self.g.poll(rid).state, ("cancelled", "finished"))
        self.g.release(rid)

    def test_bad_request_raises_with_recap_message(self):
        with self.assertRaises(recap.RecapError) as caught:
            self.g.submit([], 4)
        self.assertEqual(caught.exception.status_name, "RECAP_STATUS_INVALID_ARGUMENT")
        self.assertIn("prompt", caught.exception.message)

    def test_integers_are_not_wrapped(self):
        # ctypes would make 2**32 + 1 token 1 and seed -1 2**64 - 1: each is refused by name.
        for args, kwargs, what in (([[2**32 + 1], 4], {}, "prompt\\[0\\]"),
                                   ([[1], 4], {"seed": -1}, "seed"),
                                   ([[1], 2**31], {}, "max_new_tokens"),
                                   ([[1], 4], {"stop_ids": [1, 2**40]}, "stop_ids\\[1\\]")):
            with self.subTest(what=what):
                with self.assertRaisesRegex(ValueError, what + " = .* is outside"):
                    self.g.submit(*args, **kwargs)

    def test_close_while_another_thread_waits(self):
        # A wait with no timeout on one thread, close() on another at once: the wait ends,
        # either with the request (close cancels it) or with "closed" (wait() checks between
        # slices), and never touches the freed generator.
        for _ in range(3):
            g = recap.Generator(SPEC, device="host")
            rid = g.submit(self.prompt, len(self.want))
            outcome = []

            def waiter():
                try:
                    outcome.append(g.wait(rid))
                except ValueError as e:
                    outcome.append(str(e))

            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(0.01)
            g.close()
            t.join(5.0)
            self.assertFalse(t.is_alive())
            self.assertIn(outcome[0], (True, "the generator is closed"))
            with self.assertRaisesRegex(ValueError, "the generator is closed"):
                g.poll(rid)

    def test_check_request_without_a_generator(self):
        # recap_request_check's rules (include/recap.h), at a vocabulary of 100 and 64
        # positions: each refusal names its field; a request within them passes.
        recap.check_request([1, 2, 3], 8, 100, 64, temperature=0.7, top_p=0.9, stop_ids=[5])
        refused = [
            (([], 8), {}, "prompt"),
            (([1, 100], 8), {}, "vocab"),
            (([1, 2], 0), {}, "max_new_tokens"),
            (([1, 2], 63), {}, "max_new_tokens"),  # 2 + 63 positions > 64
            (([1, 2], 8), {"temperature": -1.0}, "temperature"),
            (([1, 2], 8), {"top_p": 1.5}, "top_p"),
            (([1, 2], 8), {"top_k": -1}, "top_k"),
            (([1, 2], 8), {"min_p": 2.0}, "min_p"),
            (([1, 2], 8), {"stop_ids": [100]}, "stop"),
        ]
        for (prompt, max_new), kwargs, field in refused:
            with self.subTest(field=field, kwargs=kwargs):
                with self.assertRaises(recap.RecapError) as caught:
                    recap.check_request(prompt, max_new, 100, 64, **kwargs)
                self.assertEqual(caught.exception.status_name, "RECAP_STATUS_INVALID_ARGUMENT")
                self.assertIn(field, caught.exception.message)

    def test_stats_count_one_request(self):
        # A generator of its own, so the counts are this request's: its prompt runs in prefill
        # (the first token), then one decode step per further token, graphs throughout.
        with recap.Generator(SPEC, device="host") as g:
            self.assertEqual(g.generate(self.prompt, len(self.want)), self.want)
            s = g.stats()
        n = len(self.want)
        self.assertEqual((s["submitted"], s["finished"], s["cancelled"]), (1, 1, 0))
        self.assertEqual(s["tokens_out"], n)
        self.assertEqual(s["decode_steps"], n - 1)
        self.assertGreaterEqual(s["prefill_steps"], 1)
        self.assertEqual(s["eager_steps"], 0)
        self.assertEqual(s["graph_steps"], s["prefill_steps"] + s["decode_steps"])
        self.assertLessEqual(s["loop_steps"], s["decode_steps"])
        self.assertGreater(s["kv_blocks"], 0)
        self.assertEqual((s["kv_blocks_used"], s["running"], s["waiting"]), (0, 0, 0))
        # One sequence of the prompt and its tokens held ceil(positions / block size) blocks.
        positions = len(self.prompt) + n - 1
        self.assertGreaterEqual(s["kv_blocks_peak"], -(-positions // s["block_size"]))
        self.assertLessEqual(s["kv_blocks_peak"], s["kv_blocks"])


if __name__ == "__main__":
    unittest.main()
