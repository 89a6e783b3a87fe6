"""Test support: stand-in packages and a torch-free bench, so the command runs end to end with
no torch, triton or GPU: the real argument checks, package discovery, imports, row assembly,
failure handling and JSON writing, with only the measuring stubbed.

`python3 scripts/peers/stubs.py FILE && ./dev fmt FILE` writes the stub run's JSON
(report/testdata/torch_peers_stub.json is one, read by report/external_test.ts; cli_test.py
checks it is current).
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import types
from typing import Iterator

if __name__ == "__main__":
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from peers import cli, worker  # noqa: E402

_PAPER_INIT = '''
from cut_cross_entropy.cce import linear_cross_entropy_apply, CCEParams  # noqa: F401

__version__ = "24.12.1"


def linear_cross_entropy(e, c, targets, ignore_index=-100, softcap=None, reduction="mean",
                         shift=False, filter_eps="auto", impl="cce", label_smoothing=0.0):
    if impl == "cce_fused":
        raise RuntimeError("stub fused kernel failed")
    from cut_cross_entropy import cce
    cce.cce_smooth_backward_kernel(None, e, c, None, None, None, label_smoothing, None)
    return ("loss", impl, filter_eps, label_smoothing)
'''

_PAPER_CCE = '''
import dataclasses


@dataclasses.dataclass
class CCEParams:
    targets: object
    valids: object
    softcap: object
    reduction: str
    filter_eps: object
    shift: bool
    batch_shape: object
    label_smoothing: float


def cce_smooth_backward_kernel(do, e, c, lse, valids, softcap, smoothing, filter_eps,
                               targets=None, shift=False, vocab_ordering=None, grad_scale=1.0):
    return None, None


def linear_cross_entropy_apply(e, c, params):
    cce_smooth_backward_kernel(None, e, c, None, None, None, params.label_smoothing,
                               params.filter_eps, vocab_ordering="sorted")
    return ("loss", "filter-on", params.filter_eps, params.label_smoothing)
'''

_PAPER_UTILS = '''
def _build_flat_valids(targets, ignore_index, shift):
    return None


def _handle_eps(filter_eps, dtype):
    return 2.0 ** -12 if filter_eps == "auto" else filter_eps
'''

_APPLE_INIT = '''
__version__ = "25.6.4"


def linear_cross_entropy(e, c, targets, bias=None, ignore_index=-100, softcap=None,
                         reduction="mean", shift=0, return_lse=False, filter_eps="auto",
                         impl="cce"):
    return ("loss", impl, filter_eps)
'''

_LIGER_FLCE = '''
class LigerFusedLinearCrossEntropyFunction:
    @staticmethod
    def apply(e, c, t, bias, ce_weight, ignore_index, lse_square_scale, label_smoothing,
              reduction):
        return ("loss", label_smoothing), None, None, None
'''


def _write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def make_packages(root: str) -> dict[str, str]:
    """Stand-ins of the three packages under root, laid out as in shared/peers/ (with a README
    table giving commits); returns each package's folder."""
    _write(root, "paper-cce/cut_cross_entropy/__init__.py", _PAPER_INIT)
    _write(root, "paper-cce/cut_cross_entropy/cce.py", _PAPER_CCE)
    _write(root, "paper-cce/cut_cross_entropy/utils.py", _PAPER_UTILS)
    _write(root, "paper-cce/cut_cross_entropy/cce_smooth_forward.py", "")
    _write(root, "apple-cce/cut_cross_entropy/__init__.py", _APPLE_INIT)
    _write(root, "liger-kernel/liger_kernel/__init__.py", "")
    _write(root, "liger-kernel/liger_kernel/ops/__init__.py", "")
    _write(root, "liger-kernel/liger_kernel/ops/fused_linear_cross_entropy.py", _LIGER_FLCE)
    _write(root, "liger-kernel/pyproject.toml", '[project]\nname = "liger_kernel"\n'
           'version = "0.8.2"\n')
    _write(root, "README.md", "| folder | commit |\n| --- | --- |\n| `paper-cce/` | 5d9cdad |\n"
           "| `apple-cce/` | d42911f |\n| `liger-kernel/` | ead96b6 (2026-08-21) |\n")
    return {k: os.path.join(root, k) for k in ("paper-cce", "apple-cce", "liger-kernel")}


class FakeRef:
    stats = {"eps": 2.0**-12, "tile": "128x128", "entriesBelowEps": 0.999,
             "tilesSkippableSorted": 0.94, "tilesSkippableUnsorted": 0.9}


class FakeTensor:
    """What the stand-in packages look at: a shape and a dtype."""

    def __init__(self, shape: tuple, dtype: str) -> None:
        self.shape, self.dtype = shape, dtype

    def size(self) -> tuple:
        return self.shape


class FakeBench:
    """bench.py without torch: measuring calls the function once and makes up figures from a
    counter, so a run is deterministic; failures are reported as bench.failure_reason does."""

    DTYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32"}

    def __init__(self) -> None:
        self.calls = 0

    def make_data(self, n, v, d, dtype, seed, device="cuda", offset=False):
        return types.SimpleNamespace(e=FakeTensor((n, d), dtype), c=FakeTensor((v, d), dtype),
                                     t=FakeTensor((n,), "int64"), offset="m" if offset else None)

    def measure_cell(self, fn, beta, mode, data, reps, warmup, grad=True):
        fn(data.e, data.c, data.t, beta)
        self.calls += 1
        return [float(self.calls + i) for i in range(reps)], [2**20 * self.calls] * reps

    def failure_reason(self, ex):
        return f"{type(ex).__name__}: {ex}"

    def free(self):
        pass

    def set_tf32(self, on):
        pass

    def upcast(self, data):
        return data

    def reference(self, data, beta, dtype):
        return FakeRef()

    def pytorch_methods(self):
        def fn(e, c, t, beta):
            return "loss"

        return {"baseline": fn, "compiled": fn, "chunked": fn, "matmul": fn}

    def accuracy_entry(self, fn, data, beta, ref):
        fn(data.e, data.c, data.t, beta)
        self.calls += 1
        out = {"loss": {"value": 2.5, "reference": 2.5, "relErr": self.calls / 2**20},
               "dE": {"relL2": 2e-3, "maxAbs": 1e-4, "refMaxAbs": 0.1, "nonFinite": 0},
               "dC": {"relL2": 3e-3, "maxAbs": 2e-4, "refMaxAbs": 0.2, "nonFinite": 0}}
        if data.offset is not None and beta > 0:
            out["droppedSmoothing"] = 0.0
        return out


FAKE_TORCH = types.SimpleNamespace(
    __version__="2.11.0+cu130", nn=types.SimpleNamespace(functional=types.SimpleNamespace()))

ENV = {"torch": "2.11.0+cu130", "cuda": "13.0", "device": "stub GPU", "triton": "3.6.0",
       "python": "3.11.7", "tf32": False, "arith": ["bf16", "fp32"],
       "date": "2026-01-01T00:00:00+00:00"}


@contextlib.contextmanager
def isolated_imports() -> Iterator[None]:
    """Forgets the stand-in packages and sys.path entries a job added, as a separate process
    would."""
    path = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = path
        for name in [m for m in sys.modules
                     if m.split(".")[0] in ("cut_cross_entropy", "liger_kernel")]:
            del sys.modules[name]


def in_process_spawn(stop_after: dict[str, int] | None = None,
                     bench: FakeBench | None = None) -> cli.Spawn:
    """A spawn that runs worker.py's code in this process with FakeBench; a job named in
    stop_after keeps only that many records and reads as killed on timeout."""
    fake = bench or FakeBench()

    def spawn(spec: dict, timeout_s: float) -> cli.WorkerResult:
        records: list[dict] = [{"env": ENV}]
        with isolated_imports():
            if spec["job"] == "pytorch":
                spec = {**spec, "version": "torch " + FAKE_TORCH.__version__}
                worker.run_pytorch(spec, fake, records.append, spec["version"])
            if spec["systems"]:
                worker.run_systems(spec, fake, records.append, FAKE_TORCH)
        name = spec["systems"][0] if spec["systems"] and spec["job"] == "system" else spec["job"]
        if stop_after and name in stop_after:
            return cli.WorkerResult(records[: stop_after[name]], None, [])
        return cli.WorkerResult(records, 0, [])

    return spawn


STUB_ARGS = ["--paper-cce", "peers/paper-cce", "--apple-cce", "peers/apple-cce", "--liger",
             "peers/liger-kernel", "--filter-probe", "--reps", "2", "--warmup", "1",
             "--methods", "baseline,matmul", "--arith", "bf16", "--accuracy-shape", "256x1000x64"]


def stub_run(out: str, extra: list[str] | None = None,
             stop_after: dict[str, int] | None = None) -> int:
    """The command on stand-in packages (relative folders, so the JSON does not name a temporary
    path) with FakeBench; liger's worker is cut short as if it hung."""
    out = os.path.abspath(out)
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        make_packages(os.path.join(tmp, "peers"))
        os.chdir(tmp)
        try:
            return cli.main(STUB_ARGS + ["--out", out] + (extra or []),
                            spawn=in_process_spawn({"liger": 3} if stop_after is None
                                                   else stop_after))
        finally:
            os.chdir(cwd)


if __name__ == "__main__":
    sys.exit(stub_run(sys.argv[1]))
