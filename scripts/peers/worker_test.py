"""worker.py's row assembly and failure handling without torch (stubs.FakeBench), the filter spy,
and, where torch is installed, one system end to end on the CPU with the real bench."""
import contextlib
import importlib.util
import io
import os
import sys
import tempfile
import types
import unittest

from peers import adapters, stubs, worker
from peers.systems import SYSTEMS

SPEC = {"dtype": "bf16", "betas": [0.1, 0.0], "reps": 2, "warmup": 1, "version": "v1",
        "n": 8, "v": 16, "d": 4, "seed": 0, "tf32": False, "accuracy": None}


def _collect(fn):
    records = []
    with contextlib.redirect_stderr(io.StringIO()):
        fn(records.append)
    return records


class SystemRows(unittest.TestCase):
    def test_a_cell_that_raises_is_its_row_and_the_rest_go_on(self):
        def flaky(e, c, t, beta):
            if beta > 0:
                raise ValueError("smoothing blew up")
            return "loss"

        bench = stubs.FakeBench()
        data = bench.make_data(8, 16, 4, "bf16", 0)
        rows = [r["row"] for r in _collect(lambda emit: worker.system_rows(
            SYSTEMS["paper-ours"], flaky, SPEC, bench, data, emit))]
        self.assertEqual([(r["beta"], r["mode"]) for r in rows],
                         [(b, m) for b in (0.1, 0.0) for m in ("fwd", "bwd", "fwd+bwd")])
        for r in rows[:3]:
            self.assertEqual(r["error"], "ValueError: smoothing blew up")
        for r in rows[3:]:
            self.assertEqual((r["reps"], r["warmup"], len(r["samplesMs"])), (2, 1, 2))
            self.assertEqual(r["timeMs"], sorted(r["samplesMs"])[0] + 0.5)
        self.assertEqual(rows[0]["version"], "v1")

    def test_unavailable_and_failed_systems(self):
        bench = stubs.FakeBench()
        rows = [r["row"] for r in _collect(lambda emit: worker.system_rows(
            SYSTEMS["torch-linear-ce"], adapters.Unavailable("no such function"), SPEC, bench,
            None, emit))]
        self.assertEqual({r["unsupported"] for r in rows}, {"no such function"})
        rows = [r["row"] for r in _collect(lambda emit: worker.system_rows(
            SYSTEMS["cce"], worker.Failed("cannot import"), SPEC, bench, None, emit))]
        self.assertEqual([r.get("unsupported") or r.get("error") for r in rows],
                         ["no label smoothing"] * 3 + ["cannot import"] * 3)
        self.assertEqual(bench.calls, 0)

    def test_a_package_that_fails_to_import(self):
        with tempfile.TemporaryDirectory() as tmp:
            dirs = stubs.make_packages(tmp)
            with open(os.path.join(dirs["paper-cce"], "cut_cross_entropy", "__init__.py"),
                      "w") as f:
                f.write("raise ImportError('No module named triton')\n")
            spec = {**SPEC, "systems": ["paper-ours"], "package": "paper-cce",
                    "path": dirs["paper-cce"],
                    "accuracy": {"n": 4, "v": 8, "d": 2, "seed": 1, "fixtures": ["cce"]}}
            with stubs.isolated_imports():
                records = _collect(lambda emit: worker.run_systems(
                    spec, stubs.FakeBench(), emit, None))
        why = f"cannot import cut_cross_entropy from {dirs['paper-cce']}: ImportError: No module named triton"
        self.assertEqual([r["row"]["error"] for r in records if "row" in r], [why] * 6)
        self.assertEqual([r["accuracy"]["error"] for r in records if "accuracy" in r], [why] * 2)


class Spy(unittest.TestCase):
    def test_records_what_the_backward_kernels_received_and_restores_them(self):
        mod = types.ModuleType("cut_cross_entropy.cce")

        def cce_backward_kernel(do, e, c, lse, valids, softcap, filter_eps, targets=None,
                                vocab_ordering=None):
            return "bwd"

        def cce_smooth_fused_backward_kernel(do, de, dc, valids, shift=False):
            return "scale"

        mod.cce_backward_kernel = cce_backward_kernel
        mod.cce_smooth_fused_backward_kernel = cce_smooth_fused_backward_kernel
        sys.modules["cut_cross_entropy.cce"] = mod
        self.addCleanup(sys.modules.pop, "cut_cross_entropy.cce")
        with adapters.FilterSpy() as spy:
            self.assertIsNone(spy.summary())
            self.assertEqual(mod.cce_backward_kernel(1, 2, 3, 4, 5, 6, 0.5, vocab_ordering=[1]),
                             "bwd")
            mod.cce_smooth_fused_backward_kernel(1, 2, 3, 4)  # no filter_eps: not recorded
        self.assertEqual(spy.summary(), {"kernel": "cce_backward_kernel", "filterEps": 0.5,
                                         "vocabSorted": True})
        self.assertIs(mod.cce_backward_kernel, cce_backward_kernel)
        self.assertIs(mod.cce_smooth_fused_backward_kernel, cce_smooth_fused_backward_kernel)


_TORCH_PAPER = '''
import torch
from cut_cross_entropy import cce  # noqa: F401

__version__ = "0"


def linear_cross_entropy(e, c, targets, ignore_index=-100, softcap=None, reduction="mean",
                         shift=False, filter_eps="auto", impl="cce", label_smoothing=0.0):
    z = (e @ c.T).float()
    return torch.nn.functional.cross_entropy(z, targets, label_smoothing=label_smoothing)
'''


@unittest.skipUnless(importlib.util.find_spec("torch"), "torch is not installed")
class OnTheCpu(unittest.TestCase):
    def test_a_system_end_to_end_with_the_real_bench(self):
        from peers import bench

        cpu = types.SimpleNamespace(**{k: getattr(bench, k) for k in dir(bench)
                                       if not k.startswith("__")})
        cpu.make_data = lambda *a, **kw: bench.make_data(*a, **{**kw, "device": "cpu"})
        cpu.measure_cell = lambda fn, beta, mode, data, reps, warmup: (
            fn(data.e, data.c, data.t, beta) and ([1.0] * reps, [0] * reps))
        cpu.free = lambda: None
        with tempfile.TemporaryDirectory() as tmp:
            dirs = stubs.make_packages(tmp)
            with open(os.path.join(dirs["paper-cce"], "cut_cross_entropy", "__init__.py"),
                      "w") as f:
                f.write(_TORCH_PAPER)
            spec = {**SPEC, "n": 32, "v": 300, "d": 16, "systems": ["paper-ours"],
                    "package": "paper-cce", "path": dirs["paper-cce"],
                    "accuracy": {"n": 64, "v": 500, "d": 16, "seed": 1,
                                 "fixtures": ["cce", "cce-offset"]}}
            with stubs.isolated_imports():
                records = _collect(lambda emit: worker.run_systems(spec, cpu, emit, None))
        rows = [r["row"] for r in records if "row" in r]
        self.assertEqual([r.get("timeMs") for r in rows], [1.0] * 6)
        acc = {(a["accuracy"]["beta"], a["accuracy"]["fixture"]): a["accuracy"]
               for a in records if "accuracy" in a}
        self.assertEqual(len(acc), 4)
        for a in acc.values():
            # bf16 inputs, fp32 logits, bf16 gradients: a few bf16 ulps
            self.assertLess(a["dE"]["relL2"], 1e-2, a)
            self.assertLess(a["dC"]["relL2"], 1e-2, a)
            self.assertLess(a["loss"]["relErr"], 1e-3, a)
        self.assertLess(abs(acc[(0.1, "cce-offset")]["droppedSmoothing"]), 0.05)
        stats = [r["fixtureStats"] for r in records if "fixtureStats" in r]
        self.assertEqual(len(stats), 4)
        self.assertEqual(stats[0]["eps"], 2.0**-12)


if __name__ == "__main__":
    unittest.main()
