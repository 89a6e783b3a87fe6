"""Each system as a function loss = f(E, C, targets, β), from its package as it is.

`load` imports the package (from a directory put first on sys.path, or the installed one) and
returns, per system, its function or an `Unavailable` saying why it cannot run here. `FilterSpy`
records what the systems' backward kernels were given (filter_eps, a vocabulary ordering), since
no kernel here reports how many tiles it skipped. Imports no torch itself.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """Why a system cannot run with what is installed (a row that says so, not a failure)."""

    reason: str


Loss = Callable[[Any, Any, Any, float], Any]


def _import(module: str, path: str | None):
    if path is not None and path not in sys.path:
        sys.path.insert(0, path)
    return importlib.import_module(module)


def _paper(path: str | None, names: list[str]) -> dict[str, Loss | Unavailable]:
    cce = _import("cut_cross_entropy", path)
    mod = importlib.import_module("cut_cross_entropy.cce")
    utils = importlib.import_module("cut_cross_entropy.utils")
    lce = cce.linear_cross_entropy

    def filter_on(e, c, t, beta):
        # cce_linear_cross_entropy with its commented-out _handle_eps call restored
        params = mod.CCEParams(
            targets=t, valids=utils._build_flat_valids(t, -100, False), softcap=None,
            reduction="mean", filter_eps=utils._handle_eps("auto", e.dtype), shift=False,
            batch_shape=t.size(), label_smoothing=beta)
        return mod.linear_cross_entropy_apply(e, c, params)

    fns: dict[str, Loss] = {
        "paper-ours": lambda e, c, t, b: lce(e, c, t, label_smoothing=b, impl="cce"),
        "paper-nofilter": lambda e, c, t, b: lce(e, c, t, label_smoothing=b, impl="cce",
                                                 filter_eps=None),
        "paper-fused": lambda e, c, t, b: lce(e, c, t, label_smoothing=b, impl="cce_fused"),
        "paper-fused-nofilter": lambda e, c, t, b: lce(e, c, t, label_smoothing=b,
                                                       impl="cce_fused", filter_eps=None),
        "paper-filter": filter_on,
    }
    return {n: fns[n] for n in names}


def _apple(path: str | None, names: list[str]) -> dict[str, Loss | Unavailable]:
    lce = _import("cut_cross_entropy", path).linear_cross_entropy
    fns: dict[str, Loss] = {
        # β is always 0 here: the package has no label smoothing
        "cce": lambda e, c, t, b: lce(e, c, t, impl="cce"),
        "cce-nofilter": lambda e, c, t, b: lce(e, c, t, impl="cce", filter_eps=None),
    }
    return {n: fns[n] for n in names}


def _liger(path: str | None, names: list[str]) -> dict[str, Loss | Unavailable]:
    _import("liger_kernel", path)
    flce = importlib.import_module("liger_kernel.ops.fused_linear_cross_entropy")
    fn = flce.LigerFusedLinearCrossEntropyFunction

    def liger(e, c, t, beta):
        # (input, weight, target, bias, ce_weight, ignore_index, lse_square_scale,
        # label_smoothing, reduction): a tuple whose first item is the loss
        return fn.apply(e, c, t, None, None, -100, 0.0, beta, "mean")[0]

    return {n: liger for n in names}


def _pytorch(torch: Any, names: list[str]) -> dict[str, Loss | Unavailable]:
    f = getattr(torch.nn.functional, "linear_cross_entropy", None)
    if f is None:
        why = f"not in torch {torch.__version__}"
        return {n: Unavailable(why) for n in names}
    return {n: (lambda e, c, t, b: f(e, c, t, label_smoothing=b)) for n in names}


def load(package: str, path: str | None, names: list[str],
         torch: Any = None) -> dict[str, Loss | Unavailable]:
    """The named systems of a package; raises what the import raises."""
    if package == "paper-cce":
        return _paper(path, names)
    if package == "apple-cce":
        return _apple(path, names)
    if package == "liger-kernel":
        return _liger(path, names)
    if package == "pytorch":
        return _pytorch(torch, names)
    raise ValueError(f"unknown package {package}")


class FilterSpy:
    """While active, records the filter_eps and vocab_ordering every backward kernel of
    `cut_cross_entropy.cce` receives (its functions named *backward_kernel that take a
    filter_eps), by wrapping them in that module's namespace, where the autograd functions look
    them up."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self._saved: list[tuple[Any, str, Callable]] = []

    def __enter__(self) -> "FilterSpy":
        mod = sys.modules.get("cut_cross_entropy.cce")
        for name in dir(mod) if mod is not None else []:
            fn = getattr(mod, name)
            if (name.endswith("backward_kernel") and callable(fn) and
                    "filter_eps" in inspect.signature(fn).parameters):
                self._saved.append((mod, name, fn))
                setattr(mod, name, self._wrap(name, fn))
        return self

    def _wrap(self, name: str, fn: Callable) -> Callable:
        sig = inspect.signature(fn)

        def spy(*args, **kwargs):
            bound = sig.bind(*args, **kwargs).arguments
            self.calls.append({
                "kernel": name,
                "filterEps": bound.get("filter_eps"),
                "vocabSorted": bound.get("vocab_ordering") is not None,
            })
            return fn(*args, **kwargs)

        return spy

    def __exit__(self, *exc: object) -> None:
        for mod, name, fn in self._saved:
            setattr(mod, name, fn)
        self._saved.clear()

    def summary(self) -> dict | None:
        """What the last backward kernel call received, or None if none was called."""
        if not self.calls:
            return None
        last = self.calls[-1]
        return {"kernel": last["kernel"], "filterEps": last["filterEps"],
                "vocabSorted": last["vocabSorted"]}
