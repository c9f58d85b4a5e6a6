"""recap.Pipeline on a GPU with PyTorch: zero copy (pointer equality, writes seen both ways),
stream order without synchronization, bind_param of CUDA tensors, dtypes, errors; every result
against torch's own computation.

Needs PyTorch with a CUDA device and a librecap.so built with CUDA (RECAP_LIBRARY); without
them every case is skipped, saying which is missing. scripts/gpu/gpu_python.sh runs it on the
GPU machine.
"""
import unittest

try:
    import torch
except ImportError:
    torch = None

import recap
from recap import _dlpack

if torch is None:
    MISSING = "PyTorch is not installed"
elif not torch.cuda.is_available():
    MISSING = "PyTorch sees no CUDA device"
else:
    MISSING = None

# y = relu(x W^T + b) * g with buckets 1, 2, 4 (the host tests' spec, on the GPU).
SPEC = """\
name: embed
dtype: %s
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

TRANSPOSE = ("name: t\ndims: {R: 2, C: 3}\ntensors:\n  a: {shape: [R, C], role: input, dtype: %s}\n"
             "ops:\n  - {op: transpose, in: [a], out: t}\noutputs: [t]\n")

TORCH_DTYPES = {} if torch is None else {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i32": torch.int32,
    "i64": torch.int64}


HALF_TOLERANCE = {"f16": (2e-3, 1e-3), "bf16": (1.6e-2, 1e-2)}  # (rtol, atol): two ulps


def quarters(shape, dtype=None):
    # Multiples of 1/4 in [-2, 2]: the products and short sums here are exact in f32 (and in
    # TF32), so f32 results compare exactly whatever the kernel's summation order.
    t = torch.randint(-8, 9, shape, device="cuda").float() / 4
    return t.to(dtype or torch.float32)


def reference(x, g, w, b):
    """torch's own computation of the spec, in f32 (the inputs are exact in every dtype)."""
    x, g, w, b = (t.float() for t in (x, g, w, b))
    return torch.relu(x @ w.T + b) * g


@unittest.skipIf(MISSING, MISSING)
class TorchCudaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.backends.cuda.matmul.allow_tf32 = False  # torch's reference in exact f32

    def setUp(self):
        self.p = recap.Pipeline(yaml=SPEC % "f32", name="embed.yaml", device="cuda")
        self.w = torch.full((4, 8), 0.25, device="cuda")
        self.b = torch.full((4,), -0.5, device="cuda")

    def tearDown(self):
        self.p.close()

    def fill(self, batch):
        x, g = quarters((batch, 8)), quarters((batch, 4))
        torch.from_dlpack(self.p.input("x", batch=batch)).copy_(x)
        torch.from_dlpack(self.p.input("g", batch=batch)).copy_(g)
        return x, g

    def test_views_are_cuda_tensors_on_recap_memory(self):
        view = self.p.input("x")
        self.assertEqual(view.__dlpack_device__(), (_dlpack.KDL_CUDA, self.p.device.index))
        x = torch.from_dlpack(view)
        self.assertEqual(x.device, torch.device("cuda", self.p.device.index))
        self.assertEqual((x.dtype, tuple(x.shape)), (torch.float32, (4, 8)))
        self.assertEqual(x.data_ptr(), view.data_ptr)  # recap's own buffer, no copy
        again = torch.from_dlpack(self.p.input("x"))
        self.assertEqual(again.data_ptr(), x.data_ptr())
        values = quarters((4, 8))
        x.copy_(values)  # a write through one import is seen through the other...
        self.assertTrue(torch.equal(again, values))

    def test_recap_reads_torch_writes_and_torch_reads_recap_writes(self):
        w, b = self.w, self.b
        for batch in (1, 3, 4, 2):
            x, g = self.fill(batch)  # torch writes recap's input buffers in place
            view = self.p.run(batch=batch)
            y = torch.from_dlpack(view)
            self.assertEqual(y.data_ptr(), self.p.tensor("y").data_ptr)
            self.assertEqual(tuple(y.shape), (batch, 4))
            self.assertTrue(torch.equal(y, reference(x, g, w, b)), "batch %d" % batch)

    def test_output_view_is_rewritten_by_the_next_run(self):
        x, g = self.fill(4)
        first = torch.from_dlpack(self.p.run(batch=4))
        kept = first.clone()
        torch.from_dlpack(self.p.input("g")).mul_(2)
        second = torch.from_dlpack(self.p.run(batch=4))
        self.assertEqual(first.data_ptr(), second.data_ptr())
        self.assertTrue(torch.equal(first, kept * 2))  # the earlier view sees the new run

    def test_streams_are_ordered_without_synchronize(self):
        producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
        x_buf = torch.from_dlpack(self.p.input("x", batch=4))
        g_buf = torch.from_dlpack(self.p.input("g", batch=4))
        self.p.run(batch=4)  # captured and replayed once: the timed path below is a replay
        # Positive inputs: every output differs from the previous run's.
        x, g = quarters((4, 8)).abs() + 0.25, quarters((4, 4)).abs() + 0.25
        stale = torch.from_dlpack(self.p.run(batch=4)).clone()
        torch.cuda.synchronize()
        with torch.cuda.stream(producer):
            # Keeps the producer busy (~50 ms): without the handshakes recap's replay would
            # read the old inputs and the consumer the old outputs.
            torch.cuda._sleep(100_000_000)
            x_buf.copy_(x)
            g_buf.copy_(g)
        view = self.p.run(batch=4, stream=producer, wait=False)  # recap waits for producer
        with torch.cuda.stream(consumer):
            got = torch.from_dlpack(view).clone()  # consumer waits for recap (__dlpack__)
        # Everything was submitted while the producer still slept: the race was real.
        self.assertFalse(producer.query(), "the producer finished before the test could race")
        consumer.synchronize()
        want = reference(x, g, self.w, self.b)
        self.assertFalse(torch.equal(stale, want), "inputs too alike to tell runs apart")
        self.assertTrue(torch.equal(got, want))

    def test_bind_param_shares_a_cuda_tensor(self):
        w = quarters((4, 8))
        self.p.bind_param("w", w)
        self.assertEqual(self.p.tensor("w").data_ptr, w.data_ptr())  # recap uses w's memory
        x, g = self.fill(2)
        self.assertTrue(torch.equal(torch.from_dlpack(self.p.run(batch=2)),
                                    reference(x, g, w, self.b)))
        w.copy_(quarters((4, 8)))  # torch's later writes reach the next run, no rebind
        self.assertTrue(torch.equal(torch.from_dlpack(self.p.run(batch=2)),
                                    reference(x, g, w, self.b)))
        b = quarters((4,))
        self.p.bind_param("b", b)
        self.assertTrue(torch.equal(torch.from_dlpack(self.p.run(batch=2)),
                                    reference(x, g, w, b)))

    def test_bind_param_errors_name_the_problem(self):
        cases = [
            (torch.zeros((4, 8), dtype=torch.float64, device="cuda"), ValueError, "dtype f64"),
            (torch.zeros((8, 4), device="cuda"), ValueError, "shape"),
            (torch.zeros((8, 4), device="cuda").t(), ValueError, "not contiguous"),
            (torch.zeros((4, 8)), ValueError, "on cpu, the pipeline on cuda:"),
            ([[0.0] * 8] * 4, TypeError, "not a DLPack tensor"),
        ]
        for tensor, error, text in cases:
            with self.assertRaisesRegex(error, text):
                self.p.bind_param("w", tensor)
        with self.assertRaises(recap.RecapError) as caught:
            self.p.bind_param("nope", torch.zeros((4, 8), device="cuda"))
        self.assertEqual(caught.exception.status_name, "RECAP_STATUS_INVALID_ARGUMENT")
        x, g = self.fill(1)  # the failed binds changed nothing
        self.assertTrue(torch.equal(torch.from_dlpack(self.p.run(batch=1)),
                                    reference(x, g, self.w, self.b)))

    def test_dlpack_arguments_follow_the_protocol(self):
        view = self.p.input("x")
        for stream in (None, -1, 1, 2, torch.cuda.current_stream().cuda_stream or 1,
                       torch.cuda.Stream().cuda_stream):
            self.assertEqual(torch.from_dlpack(_Producer(view, stream)).data_ptr(),
                             view.data_ptr, "stream %r" % (stream,))
        with self.assertRaisesRegex(ValueError, "ambiguous"):
            view.__dlpack__(stream=0)
        with self.assertRaisesRegex(BufferError, "without a copy"):
            view.__dlpack__(stream=1, copy=True)
        with self.assertRaisesRegex(BufferError, "not"):
            view.__dlpack__(dl_device=(_dlpack.KDL_CPU, 0))
        with self.assertRaises(AttributeError):
            view.__array_interface__  # device memory: DLPack only


class _Producer:
    """Hands torch a recap view's capsule made with a fixed stream argument, whatever stream
    torch asks for: each DLPack stream value goes through the handshake."""

    def __init__(self, view, stream):
        self.view, self.stream = view, stream

    def __dlpack_device__(self):
        return self.view.__dlpack_device__()

    def __dlpack__(self, **_):
        return self.view.__dlpack__(stream=self.stream)


@unittest.skipIf(MISSING, MISSING)
class TorchDtypeTest(unittest.TestCase):
    def test_each_dtype_round_trips_through_a_transpose(self):
        for name, dtype in TORCH_DTYPES.items():
            with recap.Pipeline(yaml=TRANSPOSE % name, device="cuda") as p:
                a = torch.from_dlpack(p.input("a"))
                self.assertEqual(a.dtype, dtype, name)
                values = torch.arange(-3, 3, device="cuda").reshape(2, 3).to(dtype)
                a.copy_(values)
                t = torch.from_dlpack(p.run())
                self.assertEqual(t.dtype, dtype, name)
                self.assertTrue(torch.equal(t, values.T), name)
                p.bind_param("a", values.contiguous())  # a torch tensor of that dtype as input
                self.assertTrue(torch.equal(torch.from_dlpack(p.run()), values.T), name)

    def test_half_types_compute_as_torch(self):
        for name in ("f16", "bf16"):
            dtype = TORCH_DTYPES[name]
            with recap.Pipeline(yaml=SPEC % name, device="cuda") as p:
                x, g, w = quarters((3, 8), dtype), quarters((3, 4), dtype), quarters((4, 8), dtype)
                b = torch.full((4,), -0.5, dtype=dtype, device="cuda")
                torch.from_dlpack(p.input("x", batch=3)).copy_(x)
                torch.from_dlpack(p.input("g", batch=3)).copy_(g)
                p.bind_param("w", w)
                y = torch.from_dlpack(p.run(batch=3))
                self.assertEqual(y.dtype, dtype, name)
                # torch's own computation in f32, rounded once; recap rounds h and y to the
                # half type, so they may differ by a unit or two in the last place.
                rtol, atol = HALF_TOLERANCE[name]
                torch.testing.assert_close(y, reference(x, g, w, b).to(dtype), rtol=rtol,
                                           atol=atol, msg=name)


if __name__ == "__main__":
    unittest.main()
