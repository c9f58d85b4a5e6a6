"""recap.Pipeline on the host backend: results against numpy, zero-copy views, errors, dtypes.

Needs numpy (Debian's python3-numpy) and librecap.so (RECAP_LIBRARY, or installed). Run as
`python3 -m unittest discover -s python/tests` with python/ on PYTHONPATH, or through Bazel
(//tests:python_test).
"""
import threading
import unittest
import warnings

import numpy as np

import recap
from recap import _dlpack

# y = relu(x W^T + b) * g with buckets 1, 2, 4 (examples/embed_pipeline.c's spec).
SPEC = """\
name: embed
dtype: f32
dims: {B: [1, 2, 4], D: 8, H: 4}
tensors:
  x: {shape: [B, D], role: input}
  g: {shape: [B, H], role: input}
  w: {shape: [H, D], role: param, init: value, value: 0.25}
  b: {shape: [H], role: param, init: value, value: -0.5}
ops:
  - {op: linear, in: [x, w, b], out: h, act: relu}
  - {op: mul, in: [h, g], out: y}
outputs: [y]
"""


def quarters(rng, shape):
    # Multiples of 1/4 in [-2, 2]: sums of a few of them are exact in f32, so results compare
    # exactly whatever the summation order.
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


class PipelineTest(unittest.TestCase):
    def setUp(self):
        self.p = recap.Pipeline(yaml=SPEC, name="embed.yaml", device="host")
        self.rng = np.random.default_rng()

    def tearDown(self):
        self.p.close()

    def expected(self, x, g, w, b):
        return np.maximum(x @ w.T + b, 0) * g

    def test_run_matches_numpy_for_each_bucket(self):
        w, b = np.full((4, 8), 0.25, np.float32), np.full(4, -0.5, np.float32)
        for batch in (1, 3, 4, 2):
            x, g = quarters(self.rng, (batch, 8)), quarters(self.rng, (batch, 4))
            np.asarray(self.p.input("x", batch=batch))[...] = x
            np.asarray(self.p.input("g", batch=batch))[...] = g
            y = np.from_dlpack(self.p.run(batch=batch))
            self.assertEqual(y.shape, (batch, 4))
            np.testing.assert_array_equal(y, self.expected(x, g, w, b), "batch %d" % batch)

    def test_views_share_recap_buffers(self):
        view = self.p.input("x")
        through_dlpack = np.from_dlpack(view)
        through_interface = np.asarray(self.p.input("x"))
        # One buffer, no copy: both imports point at recap's own input buffer...
        self.assertEqual(through_dlpack.ctypes.data, view.data_ptr)
        self.assertEqual(through_interface.ctypes.data, view.data_ptr)
        # ...so a write through one is seen through the other.
        values = quarters(self.rng, (4, 8))
        through_interface[...] = values
        np.testing.assert_array_equal(through_dlpack, values)

    def test_output_view_is_rewritten_by_the_next_run(self):
        np.asarray(self.p.input("x"))[...] = 1.0
        np.asarray(self.p.input("g"))[...] = 1.0
        first = np.from_dlpack(self.p.run(batch=4))
        self.assertEqual(float(first[0, 0]), 1.5)
        np.asarray(self.p.input("g"))[...] = 2.0
        second = np.from_dlpack(self.p.run(batch=4))
        self.assertEqual(first.ctypes.data, second.ctypes.data)
        self.assertEqual(float(first[0, 0]), 3.0)  # the earlier view sees the new run

    def test_bind_param_shares_caller_memory(self):
        w = quarters(self.rng, (4, 8))
        self.p.bind_param("w", w)
        self.assertEqual(self.p.tensor("w").data_ptr, w.ctypes.data)
        x, g = quarters(self.rng, (2, 8)), quarters(self.rng, (2, 4))
        np.asarray(self.p.input("x", batch=2))[...] = x
        np.asarray(self.p.input("g", batch=2))[...] = g
        b = np.full(4, -0.5, np.float32)
        np.testing.assert_array_equal(np.from_dlpack(self.p.run(batch=2)),
                                      self.expected(x, g, w, b))
        w[...] = quarters(self.rng, (4, 8))  # the caller's writes reach the next run
        np.testing.assert_array_equal(np.from_dlpack(self.p.run(batch=2)),
                                      self.expected(x, g, w, b))
        with self.assertRaisesRegex(ValueError, "shape"):
            self.p.bind_param("w", np.zeros((8, 4), np.float32))
        with self.assertRaisesRegex(ValueError, "dtype"):
            self.p.bind_param("w", np.zeros((4, 8), np.float64))

    def test_asynchronous_run_is_ordered_before_its_consumers(self):
        x, g = quarters(self.rng, (3, 8)), quarters(self.rng, (3, 4))
        np.asarray(self.p.input("x", batch=3))[...] = x
        np.asarray(self.p.input("g", batch=3))[...] = g
        # Submitted only: the DLPack export waits for it (the host backend's handshake).
        y = np.from_dlpack(self.p.run(batch=3, stream=-1, wait=False))
        w, b = np.full((4, 8), 0.25, np.float32), np.full(4, -0.5, np.float32)
        np.testing.assert_array_equal(y, self.expected(x, g, w, b))

    def test_stream_arguments_follow_dlpack(self):
        view = self.p.input("x")
        with self.assertRaisesRegex(ValueError, "ambiguous"):
            view.__dlpack__(stream=0)
        with self.assertRaisesRegex(ValueError, "not a CUDA stream"):
            view.__dlpack__(stream=-2)
        with self.assertRaisesRegex(TypeError, "stream must be"):
            view.__dlpack__(stream="1")
        with self.assertRaisesRegex(ValueError, "no CUDA streams"):
            self.p.run(batch=1, stream=0x7F00)
        with self.assertRaisesRegex(TypeError, "not a DLPack tensor"):
            self.p.bind_param("w", [[0.0] * 8] * 4)

        class OnTheGpu:  # a producer on another device is refused before its capsule is made
            def __dlpack_device__(self):
                return (_dlpack.KDL_CUDA, 0)

            def __dlpack__(self, **_):
                raise AssertionError("the capsule was asked for")
        with self.assertRaisesRegex(ValueError, "on cuda:0, the pipeline on cpu"):
            self.p.bind_param("w", OnTheGpu())

    def test_tensor_list(self):
        by_name = {t.name: t for t in self.p.tensors}
        self.assertEqual(self.p.buckets, (1, 2, 4))
        self.assertEqual(self.p.bucket_dim, "B")
        self.assertEqual(self.p.outputs, ["y"])
        self.assertEqual((by_name["x"].role, by_name["x"].shape, by_name["x"].bucket_axis),
                         ("input", (4, 8), 0))
        self.assertEqual((by_name["w"].role, by_name["w"].dtype, by_name["w"].bucket_axis),
                         ("param", "f32", -1))
        self.assertTrue(by_name["y"].is_output)

    def test_unknown_tensor_raises_recap_error(self):
        with self.assertRaises(recap.RecapError) as caught:
            self.p.input("nope")
        self.assertEqual(caught.exception.status_name, "RECAP_STATUS_INVALID_ARGUMENT")
        self.assertIn("nope", caught.exception.message)

    def test_spec_error_carries_positions(self):
        bad = SPEC.replace("[B, D], role: input", "[B, Q], role: input")
        with self.assertRaises(recap.RecapError) as caught:
            recap.Pipeline(yaml=bad, name="bad.yaml", device="host")
        self.assertEqual(caught.exception.status, -9)
        self.assertEqual(caught.exception.status_name, "RECAP_STATUS_SPEC_ERROR")
        self.assertRegex(caught.exception.message, r"bad\.yaml:5:\d+: error: .*'Q'")

    def test_batch_outside_the_buckets_is_refused(self):
        # Buffers hold the largest bucket's rows (4): more would be computed on 4 rows only.
        for call in (lambda: self.p.run(batch=5), lambda: self.p.input("x", batch=5)):
            with self.assertRaisesRegex(ValueError, r"batch 5 is above the largest bucket of B "
                                                    r"\(1, 2, 4\)"):
                call()
        with self.assertRaisesRegex(ValueError, r"batch = -1 is outside"):
            self.p.input("x", batch=-1)
        # Not wrapped by ctypes: 2**64 is not batch 0.
        with self.assertRaisesRegex(ValueError, r"batch = 18446744073709551616 is outside"):
            self.p.run(batch=2**64)
        with self.assertRaisesRegex(TypeError, "batch must be an integer, not float"):
            self.p.run(batch=2.0)
        # oversize="eager": the C API's default, the largest bucket's rows.
        with recap.Pipeline(yaml=SPEC, device="host", oversize="eager") as p:
            self.assertEqual(p.input("x", batch=9).shape, (4, 8))
            self.assertEqual(p.run(batch=9).shape, (4, 4))

    def test_arguments_python_gets_wrong(self):
        with self.assertRaisesRegex(ValueError, "must be a device number"):
            recap.Pipeline(yaml=SPEC, device="host:x")
        with self.assertRaisesRegex(ValueError, "NUL"):
            recap.Pipeline(yaml=SPEC, device="host", name="a\0b")
        with recap.Pipeline(yaml=SPEC.encode(), device="host") as p:  # bytes are taken as is
            self.assertEqual(repr(p.device), "host")
            with self.assertRaisesRegex(TypeError, "batch must be an integer, not bool"):
                p.run(batch=True)

    def test_threads_take_turns_and_close_waits_for_a_run(self):
        # recap runs a pipeline on one thread at a time: the package serializes the calls, so
        # every run computes the right rows, and close() from another thread waits for the run
        # in progress; the runs after it raise "closed" instead of touching freed memory.
        w = np.full((4, 8), 0.25, np.float32)
        b = np.full(4, -0.5, np.float32)
        x = np.ones((4, 8), np.float32)
        g = np.full((4, 4), 2.0, np.float32)
        np.asarray(self.p.input("x", batch=4))[...] = x
        np.asarray(self.p.input("g", batch=4))[...] = g
        want = self.expected(x, g, w, b)
        wrong, closed = [], []

        def runs():
            for _ in range(300):
                try:
                    y = self.p.run(batch=4)
                    if not np.array_equal(np.asarray(y), want):
                        wrong.append(np.asarray(y).copy())
                except ValueError as e:
                    closed.append(str(e))
                    return

        threads = [threading.Thread(target=runs) for _ in range(4)]
        for t in threads:
            t.start()
        threads[0].join()
        self.p.close()
        for t in threads[1:]:
            t.join()
        self.assertEqual(wrong, [])
        self.assertTrue(all("closed" in c for c in closed), closed)


    def test_a_cuda_spec_falls_back_to_the_host_without_a_gpu(self):
        # As the CLI does: a spec asking for CUDA runs on the host backend where CUDA cannot
        # run, and says so; where it can, it runs there.
        gpu = bool(recap._native.lib().recap_device_is_available(recap._native.BACKEND_CUDA))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with recap.Pipeline(yaml="device: cuda\n" + SPEC) as p:
                self.assertEqual(repr(p.device), "cuda:0" if gpu else "host")
        said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        if gpu:
            self.assertEqual(said, [])
        else:
            self.assertEqual(len(said), 1, said)
            self.assertRegex(said[0], "running on the host backend")
        with self.assertRaises(recap.RecapError):  # a broken spec still says what is wrong
            recap.Pipeline(yaml="device: cuda\n" + SPEC + "  - {op: nope, in: [y], out: z}\n")

    def test_outputs_keep_the_specs_order(self):
        spec = ("name: order\ndims: {B: [1, 2]}\ntensors:\n  x: {shape: [B, 4], role: input}\n"
                "ops:\n  - {op: relu, in: [x], out: h}\n  - {op: scale, in: [h], out: y, scale: 2.0}\n"
                "outputs: [y, h]\n")
        with recap.Pipeline(yaml=spec, device="host") as p:
            self.assertEqual(p.outputs, ["y", "h"])
            np.asarray(p.input("x"))[...] = 1.0
            views = p.run()
            self.assertEqual(list(views), ["y", "h"])
            np.testing.assert_array_equal(np.asarray(views["y"]), np.full((2, 4), 2.0, np.float32))

    def test_close_keeps_memory_that_views_still_hold(self):
        # close() ends the pipeline at once, but its memory goes back only when the last view
        # (here a numpy array made from an output, and a param another pipeline bound to one
        # of this pipeline's buffers) is gone, so none of them reads freed memory.
        np.asarray(self.p.input("x"))[...] = 1.0
        np.asarray(self.p.input("g"))[...] = 2.0
        y = np.from_dlpack(self.p.run(batch=4))
        other = recap.Pipeline(yaml=SPEC, device="host")
        np.asarray(other.input("x"))[...] = 1.0
        np.asarray(other.input("g"))[...] = 1.0
        other.bind_param("b", self.p.tensor("b"))  # this pipeline's b: -0.5 everywhere
        self.p.close()
        with self.assertRaisesRegex(ValueError, "closed"):
            self.p.run()
        self.assertIsNotNone(self.p._handle)  # y and other's b still point into it
        np.testing.assert_array_equal(y, np.full((4, 4), 3.0, np.float32))
        np.testing.assert_array_equal(np.asarray(other.run()), np.full((4, 4), 1.5, np.float32))
        del y
        self.assertIsNotNone(self.p._handle)
        other.close()  # gives the bound b back, the last view of this pipeline
        self.assertIsNone(self.p._handle)
        self.assertIsNone(other._handle)


class DtypeTest(unittest.TestCase):
    """A transpose in each dtype: written as numpy writes it, read back through DLPack."""

    def spec(self, dtype):
        return ("name: t\ndims: {R: 2, C: 3}\ntensors:\n"
                "  a: {shape: [R, C], role: input, dtype: %s}\n"
                "ops:\n  - {op: transpose, in: [a], out: t}\noutputs: [t]\n" % dtype)

    def test_round_trip(self):
        for dtype, numpy_dtype in (("f32", np.float32), ("f16", np.float16), ("i32", np.int32),
                                   ("i64", np.int64)):
            with recap.Pipeline(yaml=self.spec(dtype), device="host") as p:
                a = np.arange(-3, 3).reshape(2, 3).astype(numpy_dtype)
                np.asarray(p.input("a"))[...] = a
                t = np.from_dlpack(p.run())
                self.assertEqual(t.dtype, numpy_dtype, dtype)
                np.testing.assert_array_equal(t, a.T, dtype)

    def test_bf16_dlpack_dtype(self):
        # numpy has no bfloat16: check what a consumer (torch) would be told, as a consumer
        # reads it, which also gives the capsule back through its deleter.
        with recap.Pipeline(yaml=self.spec("bf16"), device="host") as p:
            view = p.input("a")
            self.assertEqual(_dlpack.Imported(view.__dlpack__()).dtype, (_dlpack.KDL_BFLOAT, 16, 1))
            with self.assertRaisesRegex(TypeError, "bf16"):
                np.asarray(view)

    def test_dlpack_device_and_unconsumed_capsule(self):
        with recap.Pipeline(yaml=self.spec("f32"), device="host") as p:
            view = p.input("a")
            self.assertEqual(view.__dlpack_device__(), (_dlpack.KDL_CPU, 0))
            live = len(_dlpack._live)
            capsule = view.__dlpack__()
            self.assertEqual(len(_dlpack._live), live + 1)
            del capsule  # never consumed: its destructor releases the export
            self.assertEqual(len(_dlpack._live), live)


if __name__ == "__main__":
    unittest.main()
