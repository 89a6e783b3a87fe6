"""What a worker measures with torch: the data recipe, CUDA-event timings with the memory rule,
the PyTorch rows' functions, and accuracy against float64.

Imported only by a worker once torch is known to be there. Data, reference and accuracy take a
device, so they also run on the CPU (bench_test.py); timings need CUDA.
"""
from __future__ import annotations

import dataclasses
import datetime
import gc
import platform
from typing import Callable

import torch
import torch.nn.functional as F

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

# The gradient filter of Cut Cross-Entropy and of the paper's fork: a 128 × 128 tile of the
# backward is skipped when every |∂loss/∂z| in it is below eps = machine-eps(dtype) / 32.
FILTER_TILE = 128


def filter_eps(dtype: torch.dtype) -> float:
    """The filter threshold "auto" resolves to (cut_cross_entropy.utils._handle_eps)."""
    return torch.finfo(dtype).eps / 32


def environment(tf32: bool, arith: list[str]) -> dict:
    """torch, CUDA, device, triton and Python versions; the date."""
    try:
        import triton  # noqa: PLC0415  (optional: the PyTorch rows need no triton)

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001  (any import failure means: no usable triton)
        triton_version = None
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0),
        "triton": triton_version,
        "python": platform.python_version(),
        "tf32": tf32,
        "arith": arith,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }


@dataclasses.dataclass
class Data:
    """Inputs of one problem: E (n×d), C (v×d), targets, and the offset added to every C row."""

    e: torch.Tensor
    c: torch.Tensor
    t: torch.Tensor
    offset: torch.Tensor | None = None


def make_data(n: int, v: int, d: int, dtype: str, seed: int, device: str = "cuda",
              offset: bool = False) -> Data:
    """The Cut Cross-Entropy benchmark's recipe: E = randn/d^¼, C = randn/d^¼, C[:n] = E (one
    strongly peaked logit per token), targets uniform. With `offset`, every row of C then gets
    the same vector m (all entries 1/d^¼): softmax is unchanged (each row's logits shift by
    E_n·m) and so are the exact loss gradients, but Σ_v C_v = |V|·m is no longer near zero, so
    a backward that drops −β/|V| on skipped tiles shows a bias along m in dE."""
    dt = DTYPES[dtype]
    g = torch.Generator(device=device).manual_seed(seed)
    e = (torch.randn(n, d, device=device, generator=g) / d**0.25).to(dt)
    c = (torch.randn(v, d, device=device, generator=g) / d**0.25).to(dt)
    c[: min(n, v)] = e[: min(n, v)]
    t = torch.randint(0, v, (n,), device=device, generator=g)
    m = None
    if offset:
        m = torch.full((d,), 1 / d**0.25, device=device, dtype=torch.float64)
        c = (c.double() + m).to(dt)
    return Data(e, c, t, m)


def upcast(data: Data) -> Data:
    """The same values in float32 (the fp32 rows' inputs)."""
    return Data(data.e.float(), data.c.float(), data.t, data.offset)


def set_tf32(on: bool) -> None:
    """Whether fp32 matmuls may use TF32 tensor cores."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def free() -> None:
    """Returns cached GPU memory, so the next job's peaks start from what is live."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def timed(fn: Callable[[], object]) -> tuple[float, int]:
    """CUDA-event ms of one call and its peak allocated bytes above those live before it."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start.record()
    out = fn()
    end.record()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return start.elapsed_time(end), peak


def measure_cell(fn: Callable, beta: float, mode: str, data: Data, reps: int, warmup: int,
                 grad: bool = True) -> tuple[list[float], list[int]]:
    """Times and peaks of `reps` calls after `warmup` in one mode, on fresh copies of E and C.

    fwd runs with autograd on (the forward keeps what the backward needs, as in the paper); bwd
    times loss.backward() of an untimed forward; fwd+bwd times both in one call."""
    times: list[float] = []
    peaks: list[int] = []
    t = data.t
    for i in range(warmup + reps):
        e = data.e.clone().requires_grad_(grad)
        c = data.c.clone().requires_grad_(grad)
        if mode == "fwd":
            ms, peak = timed(lambda: fn(e, c, t, beta))
        elif mode == "bwd":
            loss = fn(e, c, t, beta)
            ms, peak = timed(lambda: loss.backward())
            del loss
        else:
            def fb():
                loss = fn(e, c, t, beta)
                loss.backward()
                return loss

            ms, peak = timed(fb)
        del e, c
        if i >= warmup:
            times.append(ms)
            peaks.append(peak)
    return times, peaks


def failure_reason(ex: BaseException) -> str:
    """One line for a failed cell; frees the cache after running out of memory."""
    if isinstance(ex, torch.cuda.OutOfMemoryError):
        torch.cuda.empty_cache()
        return f"OOM: {str(ex).splitlines()[0] if str(ex) else 'out of memory'}"
    text = str(ex).strip().splitlines()
    return f"{type(ex).__name__}: {text[0] if text else ''}".rstrip(": ")


def pytorch_methods() -> dict[str, Callable]:
    """The PyTorch rows' functions of (E, C, targets, β)."""

    def baseline(e, c, t, beta):
        logits = (e @ c.T).float()
        return F.cross_entropy(logits, t, label_smoothing=beta)

    def chunked(e, c, t, beta, chunks=8):
        # torchtune's CEWithChunkedOutputLoss: all chunks' logits exist, each upcast and reduced
        logits = [ec @ c.T for ec in e.chunk(chunks)]
        total = sum(
            F.cross_entropy(lc.float(), tc, reduction="sum", label_smoothing=beta)
            for lc, tc in zip(logits, t.chunk(chunks))
        )
        return total / (t != -100).sum()

    def matmul(e, c, t, beta):
        return e @ c.T

    return {"baseline": baseline, "compiled": torch.compile(baseline), "chunked": chunked,
            "matmul": matmul}


@dataclasses.dataclass
class Reference:
    """The float64 loss and gradients of one problem and β."""

    loss: float
    de: torch.Tensor
    dc: torch.Tensor
    stats: dict


def reference(data: Data, beta: float, input_dtype: torch.dtype) -> Reference:
    """Loss, dE and dC in float64 from the (rounded) inputs, and how much of the backward the
    gradient filter could skip on them."""
    e = data.e.detach().double().requires_grad_(True)
    c = data.c.detach().double().requires_grad_(True)
    logits = e @ c.T
    loss = F.cross_entropy(logits, data.t, label_smoothing=beta)
    loss.backward()
    with torch.no_grad():
        stats = skippable(logits, data.t, beta, filter_eps(input_dtype))
    return Reference(loss.item(), e.grad, c.grad, stats)


def skippable(logits: torch.Tensor, t: torch.Tensor, beta: float, eps: float) -> dict:
    """What a tile filter testing |p − β/|V| − (1−β)[v = t]| < eps could skip: the fraction of
    entries below eps, and of 128 × 128 tiles entirely below it with the vocabulary in the order
    of its mean logit (the sorting of the filtered backward) and in its own order."""
    n, v = logits.shape
    g = torch.softmax(logits, dim=1) - beta / v
    g[torch.arange(n, device=g.device), t] -= 1 - beta
    small = g.abs() < eps
    order = torch.argsort(logits.mean(dim=0))
    return {
        "eps": eps,
        "tile": f"{FILTER_TILE}x{FILTER_TILE}",
        "entriesBelowEps": small.double().mean().item(),
        "tilesSkippableSorted": _tiles_all(small[:, order]),
        "tilesSkippableUnsorted": _tiles_all(small),
    }


def _tiles_all(small: torch.Tensor) -> float:
    """Fraction of FILTER_TILE² tiles (edge tiles padded with True) that are all True."""
    n, v = small.shape
    b = FILTER_TILE
    pad = torch.ones((n + b - 1) // b * b, (v + b - 1) // b * b, dtype=torch.bool,
                     device=small.device)
    pad[:n, :v] = small
    tiles = pad.view(pad.shape[0] // b, b, pad.shape[1] // b, b).permute(0, 2, 1, 3)
    return tiles.reshape(tiles.shape[0], tiles.shape[1], -1).all(dim=2).double().mean().item()


def _errors(x: torch.Tensor | None, ref: torch.Tensor) -> dict:
    if x is None:
        return {"missing": True}
    diff = x.detach().double() - ref
    return {
        "relL2": (diff.norm() / ref.norm()).item(),
        "maxAbs": diff.abs().max().item(),
        "refMaxAbs": ref.abs().max().item(),
        "nonFinite": int((~torch.isfinite(x)).sum().item()),
    }


def poison_cache(device: str, nbytes: int = 1 << 30) -> None:
    """Fills free cached GPU memory with NaN bit patterns (0xFF bytes) so an output element a
    kernel leaves unwritten shows as NaN, not as a plausible zero (best effort: tensors the
    kernels zero themselves are unaffected)."""
    if device != "cuda":
        return
    junk = torch.empty(nbytes, dtype=torch.uint8, device=device)
    junk.fill_(255)
    del junk


def accuracy_entry(fn: Callable, data: Data, beta: float, ref: Reference) -> dict:
    """Loss, dE and dC of one call against float64 (relative L2, largest absolute error); with
    the offset fixture and β > 0, the fraction of the −β/|V| term dE lost, read from dE's bias
    along the offset m: the exact gradient does not depend on m, a backward that drops −β/|V|·C_v
    on a fraction f of the vocabulary adds (β·f/n)·m to every dE row (mean reduction)."""
    poison_cache(data.e.device.type)
    e = data.e.clone().requires_grad_(True)
    c = data.c.clone().requires_grad_(True)
    loss = fn(e, c, data.t, beta)
    loss.backward()
    value = float(loss.detach().float().item())
    out = {
        "loss": {"value": value, "reference": ref.loss,
                 "relErr": abs(value - ref.loss) / abs(ref.loss)},
        "dE": _errors(e.grad, ref.de),
        "dC": _errors(c.grad, ref.dc),
    }
    if data.offset is not None and beta > 0 and e.grad is not None:
        m = data.offset
        proj = (e.grad.double() - ref.de) @ m / (m @ m)
        out["droppedSmoothing"] = (proj.mean() * data.e.shape[0] / beta).item()
    return out
