"""Rows of the external JSON (long format, one per method × β × mode) and the file itself.

A row carries what the report needs to read it alone: its label, arithmetic, the package version,
whether its forward already computes the gradients, and either its timings (CUDA-event medians in
ms, peak bytes above those live before the call), an `error` (it failed) or `unsupported` (the
system has no such setting, e.g. no label smoothing). Imports no torch.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from typing import Any

from peers.systems import NO_SMOOTHING, System

MODES = ["fwd", "bwd", "fwd+bwd"]

BWD_SCALES_NOTE = ("bwd only scales the gradients its forward computed (NA in the paper's "
                   "table)")
FWD_GRADS_NOTE = "its forward computes the loss and both gradients"


def base_row(method: str, label: str, arithmetic: str, beta: float, mode: str, *, system: str,
             version: str | None, grads_in_forward: bool = False,
             note: str | None = None) -> dict:
    """A row without results yet."""
    row: dict[str, Any] = {
        "method": method,
        "label": label,
        "arithmetic": arithmetic,
        "beta": beta,
        "mode": mode,
        "external": True,
        "timeSource": "cuda-event",
        "system": system,
        "gradsInForward": grads_in_forward,
    }
    if version is not None:
        row["version"] = version
    if note:
        row["note"] = note
    return row


def system_row(system: System, arithmetic: str, version: str | None, beta: float,
               mode: str) -> dict:
    """A row of an external system; grads-in-forward systems say what their fwd and bwd hold."""
    note = None
    if system.grads_in_forward:
        note = BWD_SCALES_NOTE if mode == "bwd" else FWD_GRADS_NOTE
    return base_row(system.name, system.label, arithmetic, beta, mode, system=system.package,
                    version=version, grads_in_forward=system.grads_in_forward, note=note)


def with_timings(row: dict, times: list[float], peaks: list[int], reps: int, warmup: int) -> dict:
    """The row with its medians (ms), range, samples and largest peak (bytes)."""
    row.update(
        timeMs=statistics.median(times),
        timeMsMin=min(times),
        timeMsMax=max(times),
        samplesMs=times,
        peakBytes=max(peaks),
        reps=reps,
        warmup=warmup,
    )
    return row


def with_error(row: dict, reason: str) -> dict:
    """The row of a cell that failed, with the reason on one line."""
    row["error"] = one_line(reason)
    return row


def one_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of a message, shortened."""
    lines = [x.strip() for x in str(text).splitlines() if x.strip()]
    first = lines[0] if lines else "failed without a message"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def planned_cells(system: System, betas: list[float]) -> list[tuple[float, str, str | None]]:
    """(β, mode, why it is not measured or None) for every cell of a system."""
    out = []
    for beta in betas:
        why = NO_SMOOTHING if beta > 0 and not system.smoothing else None
        out.extend((beta, mode, why) for mode in MODES)
    return out


def unsupported_row(system: System, arithmetic: str, version: str | None, beta: float,
                    mode: str, why: str) -> dict:
    """The row of a cell the system cannot run (e.g. β > 0 without label smoothing)."""
    row = system_row(system, arithmetic, version, beta, mode)
    row["unsupported"] = why
    return row


def accuracy_key(entry: dict) -> tuple:
    """What identifies an accuracy entry."""
    return (entry["method"], entry["beta"], entry["fixture"])


def document(env: dict, shape: dict, rows: list[dict], accuracy: dict | None,
             systems: dict[str, dict]) -> dict:
    """The external JSON: environment, shape, data recipe, rows, accuracy and systems."""
    doc: dict[str, Any] = {"env": env, "shape": shape, "fixture": "cce", "rows": rows}
    if accuracy is not None:
        doc["accuracy"] = accuracy
    if systems:
        doc["systems"] = systems
    return doc


def finite(x: Any) -> Any:
    """The value with every NaN or infinity replaced by None (JSON has no such numbers)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def write_json(path: str, doc: dict) -> None:
    """Writes the document atomically (a temporary file renamed over the target)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(finite(doc), f, indent=1, ensure_ascii=False, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)
