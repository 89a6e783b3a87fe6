"""The command without torch: argument errors, the stub run end to end, worker plumbing."""
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import textwrap
import unittest

from peers import cli, stubs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(REPO, "report", "testdata", "torch_peers_stub.json")


def _never(spec, timeout_s):
    raise AssertionError(f"no worker should start, got {spec['job']} {spec['systems']}")


def _run(argv, spawn=_never):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = cli.main(argv, spawn=spawn)
    return status, err.getvalue()


class ArgumentErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dirs = stubs.make_packages(os.path.join(self.tmp.name, "peers"))
        self.out = os.path.join(self.tmp.name, "out", "x.json")

    def tearDown(self):
        self.tmp.cleanup()

    def _fails(self, argv, pattern):
        status, err = _run(argv + ["--out", self.out])
        self.assertEqual(status, 2, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertRegex(lines[0], "^error: " + pattern)
        self.assertFalse(os.path.exists(self.out))

    def test_unknown_system(self):
        self._fails(["--systems", "paper-ours,flash-ce"], "unknown system 'flash-ce'")

    def test_a_directory_that_holds_no_such_package(self):
        empty = os.path.join(self.tmp.name, "empty")
        os.mkdir(empty)
        self._fails(["--paper-cce", empty], "--paper-cce .*empty: holds no cut_cross_entropy")
        self._fails(["--liger", empty], "--liger .*empty: holds no liger_kernel")
        self._fails(["--apple-cce", os.path.join(empty, "nope")], "--apple-cce .*: not a dir")
        # each cut_cross_entropy given for the other
        self._fails(["--paper-cce", self.dirs["apple-cce"]], ".*no label smoothing.*Apple's")
        self._fails(["--apple-cce", self.dirs["paper-cce"]], ".*the paper's fork")

    def test_bad_values(self):
        self._fails(["--beta", "1.5"], "--beta must be in \\[0, 1\\]")
        self._fails(["--methods", "baseline,flash"], "--methods: unknown 'flash'")
        self._fails(["--arith", "tf16"], "--arith: unknown 'tf16'")
        self._fails(["--fp32-methods", "x"], "--fp32-methods: unknown 'x'")
        self._fails(["--accuracy-shape", "12x3"], "--accuracy-shape: expected NxVxD")
        self._fails(["--reps", "0"], "--reps must be at least 1")
        self._fails(["--timeout-s", "0"], "--timeout-s must be positive")
        self._fails(["--frobnicate"], "unrecognized arguments: --frobnicate")
        self._fails(["--n", "many"], "argument --n: invalid int value")
        status, err = _run(["--systems", "none"])
        self.assertEqual((status, err), (2, "error: the following arguments are required: --out\n"))

    def test_a_host_without_torch_or_cuda(self):
        def spawn(spec, timeout_s):
            return cli.WorkerResult([{"fatal": "no CUDA device"}], 3, [])

        status, err = _run(["--out", self.out, "--systems", "none"], spawn)
        self.assertEqual((status, err.strip()), (2, "torch_peers: pytorch\nerror: no CUDA device"))
        self.assertFalse(os.path.exists(self.out))


class StubRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "t.json")
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(stubs.stub_run(self.out), 0)
        with open(self.out, encoding="utf-8") as f:
            self.doc = json.load(f)

    def tearDown(self):
        self.tmp.cleanup()

    def _rows(self, method, **kw):
        return [r for r in self.doc["rows"] if r["method"] == method and
                all(r.get(k) == v for k, v in kw.items())]

    def test_every_planned_cell_is_a_row(self):
        keys = [(r["method"], r["beta"], r["mode"]) for r in self.doc["rows"]]
        self.assertEqual(len(keys), len(set(keys)))
        systems = ["paper-ours", "paper-nofilter", "paper-fused", "cce", "cce-nofilter", "liger",
                   "torch-linear-ce", "paper-filter"]
        self.assertEqual(sorted(self.doc["systems"]), sorted(systems))
        for s in systems:
            self.assertEqual(len(self._rows(s)), 6, s)
        # PyTorch rows: baseline × 2 β × 3 modes, the product alone once
        self.assertEqual(len(self._rows("torch-baseline")), 6)
        self.assertEqual(len(self._rows("torch-matmul")), 1)

    def test_a_system_that_raises_is_reported_in_its_rows(self):
        for r in self._rows("paper-fused"):
            self.assertEqual(r["error"], "RuntimeError: stub fused kernel failed")
            self.assertNotIn("timeMs", r)
            self.assertTrue(r["gradsInForward"])
        entries = [a for a in self.doc["accuracy"]["entries"] if a["method"] == "paper-fused"]
        self.assertEqual(len(entries), 4)
        self.assertTrue(all(a["error"].startswith("RuntimeError") for a in entries))
        # and the run went on
        self.assertTrue(all("timeMs" in r for r in self._rows("paper-nofilter")))

    def test_what_each_row_carries(self):
        r = self._rows("paper-ours", beta=0.1, mode="fwd")[0]
        self.assertEqual(r["version"], "cut-cross-entropy 24.12.1, commit 5d9cdad "
                                       "(from peers/paper-cce)")
        self.assertEqual(r["arithmetic"], "bf16 tensor cores (Triton)")
        self.assertEqual((r["external"], r["gradsInForward"], r["reps"]), (True, False, 2))
        self.assertEqual(len(r["samplesMs"]), 2)
        bwd = self._rows("liger", beta=0.1, mode="bwd")[0]
        self.assertIn("only scales", bwd["note"])
        self.assertEqual(self._rows("liger")[0]["version"],
                         "liger-kernel 0.8.2, commit ead96b6 (from peers/liger-kernel)")

    def test_no_label_smoothing_and_no_linear_cross_entropy(self):
        for r in self._rows("cce", beta=0.1) + self._rows("cce-nofilter", beta=0.1):
            self.assertEqual(r["unsupported"], "no label smoothing")
        self.assertTrue(all("timeMs" in r for r in self._rows("cce", beta=0.0)))
        for r in self._rows("torch-linear-ce"):
            self.assertEqual(r["unsupported"], "not in torch 2.11.0+cu130")

    def test_a_worker_stopped_on_timeout(self):
        liger = self._rows("liger")
        self.assertEqual([("timeMs" in r) for r in liger], [True, True] + [False] * 4)
        for r in liger[2:]:
            self.assertEqual(r["error"], "not measured: the worker was stopped after 600 s "
                                         "(--timeout-s)")

    def test_what_the_backward_kernels_received(self):
        acc = {(a["method"], a["beta"], a["fixture"]): a for a in self.doc["accuracy"]["entries"]}
        self.assertEqual(acc[("paper-ours", 0.1, "cce")]["kernel"]["filterEps"], None)
        probe = acc[("paper-filter", 0.1, "cce-offset")]
        self.assertEqual(probe["kernel"], {"kernel": "cce_smooth_backward_kernel",
                                           "filterEps": 2.0**-12, "vocabSorted": True})
        self.assertIn("droppedSmoothing", probe)
        self.assertEqual(self.doc["accuracy"]["shape"],
                         {"n": 256, "v": 1000, "d": 64, "dtype": "bf16"})
        self.assertEqual(sorted(self.doc["accuracy"]["fixtures"]), ["cce", "cce-offset"])

    def test_the_committed_stub_json_is_current(self):
        with open(FIXTURE, encoding="utf-8") as f:
            self.assertEqual(json.load(f), self.doc, "regenerate: python3 scripts/peers/stubs.py "
                             f"{FIXTURE} && ./dev fmt {FIXTURE}")


class NotFound(unittest.TestCase):
    @unittest.skipIf(importlib.util.find_spec("liger_kernel") is not None, "liger is installed")
    def test_a_system_not_found_is_a_row_and_starts_no_worker(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "x.json")
            status, err = _run(["--out", out, "--systems", "liger", "--methods", ""])
            self.assertEqual(status, 0, err)
            with open(out, encoding="utf-8") as f:
                rows = json.load(f)["rows"]
        self.assertEqual(len(rows), 6)
        for r in rows:
            self.assertEqual(r["error"], "not found: pass --liger DIR or install it "
                                         "(pip install liger-kernel)")


class WorkerPlumbing(unittest.TestCase):
    def _worker(self, body):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        path = os.path.join(tmp.name, "w.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(body))
        old = cli.WORKER
        cli.WORKER = path
        self.addCleanup(setattr, cli, "WORKER", old)

    def test_records_status_and_last_stderr_line(self):
        self._worker("""
            import sys
            with open(sys.argv[2], "w") as f:
                f.write('{"env": {"device": "x"}}\\n{"row": {"method": "m"}}\\n{"row": {"meth')
            print("Traceback ...", file=sys.stderr)
            print("RuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
            sys.exit(5)
        """)
        with contextlib.redirect_stderr(io.StringIO()):
            r = cli.run_worker({"job": "x"}, 30)
        self.assertEqual(r.status, 5)
        self.assertEqual(r.records, [{"env": {"device": "x"}}, {"row": {"method": "m"}}])
        self.assertEqual(r.stderr_tail[-1], "RuntimeError: CUDA error: an illegal memory access")
        self.assertEqual(cli._why_missing(r, 30), "not measured: the worker ended with status 5: "
                                                  "RuntimeError: CUDA error: an illegal memory "
                                                  "access")

    def test_a_worker_past_its_timeout_is_killed(self):
        self._worker("""
            import subprocess, sys, time
            with open(sys.argv[2], "w") as f:
                f.write('{"row": {"method": "m"}}\\n')
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            time.sleep(60)
        """)
        with contextlib.redirect_stderr(io.StringIO()):
            r = cli.run_worker({"job": "x"}, 1.5)
        self.assertIsNone(r.status)
        self.assertEqual(r.records, [{"row": {"method": "m"}}])


if __name__ == "__main__":
    sys.exit(unittest.main())
