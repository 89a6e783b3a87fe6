"""The command: arguments, one worker process per job, and the merged JSON.

Imports no torch. Bad arguments (an unknown system, method or arithmetic; a directory that holds
no such package; a β outside [0, 1]) give one line on stderr and exit status 2 before anything
runs; so does a host without torch or without a CUDA device (the first worker says so). A system
that is not found, cannot be imported, raises, hangs past --timeout-s or crashes is reported in
its rows, and the run goes on.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, Callable

from peers.rows import (
    accuracy_key, base_row, document, planned_cells, system_row, unsupported_row, with_error,
    write_json)
from peers.systems import (
    DEFAULT_SYSTEMS, PACKAGES, SYSTEMS, TORCH_ARITHS, TORCH_METHODS, InputError, Located, System,
    arithmetic, locate, parse_systems, torch_cells)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")

FIXTURES = {
    "cce": "the Cut Cross-Entropy benchmark's recipe: E = randn/D^¼, C = randn/D^¼, C[0:N] = E, "
           "targets uniform",
    "cce-offset": "the cce recipe, then m (every entry 1/D^¼) added to every row of C: "
                  "Σ_v C_v = |V|·m while softmax and the exact gradients are unchanged, so a "
                  "dropped −β/|V|·C_v term shows as a bias along m",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


def parser() -> argparse.ArgumentParser:
    """The command line (see scripts/torch_peers.py)."""
    ap = _Parser(prog="torch_peers.py", description="Same-card rows for the Table 3 report: PyTorch and the seeds' own systems (docs/peers.md).")
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--v", type=int, default=256000)
    ap.add_argument("--d", type=int, default=2304)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--beta", type=float, action="append", help="repeatable; default 0.1 and 0")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--methods", default="baseline,compiled,chunked,matmul",
                    help="PyTorch rows (empty: none)")
    ap.add_argument("--arith", default="bf16,fp32", help="bf16 (tensor cores), fp32 (TF32 off)")
    ap.add_argument("--fp32-methods", default="baseline,chunked,matmul",
                    help="PyTorch rows also measured in fp32 arithmetic")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in fp32 matmuls (off by default)")
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                    help=f"external systems, or none (known: {', '.join(SYSTEMS)})")
    for pkg in PACKAGES.values():
        ap.add_argument(pkg.flag, metavar="DIR",
                        help=f"folder holding {pkg.title}'s {pkg.module} (else the installed one)")
    ap.add_argument("--filter-probe", action="store_true",
                    help="add paper-filter (the paper's kernel with its filter on) and the "
                         "cce-offset accuracy data, where a dropped −β/|V| term shows")
    ap.add_argument("--accuracy-shape", default="2048x32000x2304", help="NxVxD, or none")
    ap.add_argument("--timeout-s", type=float, default=600, help="limit of each worker process")
    return ap


def _list(flag: str, text: str, known: Any) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    for x in items:
        if x not in known:
            raise InputError(f"{flag}: unknown '{x}' (known: {', '.join(known)})")
    return items


def _shape(text: str) -> dict | None:
    if text == "none":
        return None
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise InputError(f"--accuracy-shape: expected NxVxD with positive integers, got '{text}'")
    n, v, d = (int(p) for p in parts)
    return {"n": n, "v": v, "d": d}


@dataclasses.dataclass
class Options:
    """The checked arguments."""

    args: argparse.Namespace
    betas: list[float]
    methods: list[str]
    ariths: list[str]
    fp32_methods: list[str]
    systems: list[System]
    located: dict[str, Located | str]
    accuracy: dict | None


def options(argv: list[str]) -> Options:
    """Parses and checks the arguments; InputError names the first problem."""
    a = parser().parse_args(argv)
    betas = a.beta if a.beta is not None else [0.1, 0.0]
    for b in betas:
        if not 0.0 <= b <= 1.0:
            raise InputError(f"--beta must be in [0, 1], got {b}")
    for flag, x, least in (("--n", a.n, 1), ("--v", a.v, 1), ("--d", a.d, 1),
                           ("--reps", a.reps, 1), ("--warmup", a.warmup, 0)):
        if x < least:
            raise InputError(f"{flag} must be at least {least}, got {x}")
    if a.timeout_s <= 0:
        raise InputError(f"--timeout-s must be positive, got {a.timeout_s}")
    systems = parse_systems(a.systems, a.filter_probe)
    located: dict[str, Located | str] = {}
    for key, pkg in PACKAGES.items():
        given = getattr(a, pkg.flag[2:].replace("-", "_"))
        if given is not None or any(s.package == key for s in systems):
            located[key] = locate(pkg, given)
    acc = _shape(a.accuracy_shape)
    if acc is not None:
        fixtures = ["cce", "cce-offset"] if a.filter_probe else ["cce"]
        acc.update(dtype=a.dtype, seed=1, fixtures=fixtures)
    return Options(a, betas, _list("--methods", a.methods, TORCH_METHODS),
                   _list("--arith", a.arith, TORCH_ARITHS),
                   _list("--fp32-methods", a.fp32_methods, TORCH_METHODS), systems, located, acc)


@dataclasses.dataclass
class Job:
    """One worker's work: its spec (None: nothing to run, the planned rows say why), and the
    rows and accuracy entries to report if the worker never measures them."""

    name: str
    spec: dict | None
    planned: list[dict]
    planned_accuracy: list[tuple] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class WorkerResult:
    """What a worker left: its records, exit status (None: killed on timeout) and last lines."""

    records: list[dict]
    status: int | None
    stderr_tail: list[str]


def _spec(o: Options, job: str, systems: list[System], package: str, located: Located | None,
          version: str) -> dict:
    a = o.args
    return {
        "job": job, "systems": [s.name for s in systems], "package": package,
        "path": located.path if located else None, "version": version,
        "n": a.n, "v": a.v, "d": a.d, "dtype": a.dtype, "betas": o.betas, "reps": a.reps,
        "warmup": a.warmup, "seed": 0, "methods": o.methods if job == "pytorch" else [],
        "ariths": o.ariths, "fp32Methods": o.fp32_methods, "tf32": a.tf32,
        "accuracy": o.accuracy,
    }


def _system_planned(s: System, dtype: str, version: str | None,
                    betas: list[float]) -> list[dict]:
    arith = arithmetic(s, dtype)
    return [unsupported_row(s, arith, version, b, m, why) if why else
            system_row(s, arith, version, b, m) for b, m, why in planned_cells(s, betas)]


def _accuracy_keys(o: Options, methods: list[tuple[str, bool]]) -> list[tuple]:
    if o.accuracy is None:
        return []
    return [(m, b, f) for f in o.accuracy["fixtures"] for b in o.betas for m, smoothing in methods
            if b == 0 or smoothing]


def jobs(o: Options) -> tuple[list[Job], dict[str, dict]]:
    """The jobs in report order (PyTorch first), and every external system's summary."""
    out: list[Job] = []
    summary: dict[str, dict] = {}
    torch_systems = [s for s in o.systems if s.package == "pytorch"]
    if o.methods or torch_systems:
        cells = torch_cells(o.methods, o.ariths, o.fp32_methods, o.betas, o.args.dtype)
        planned = [base_row(c.method, c.label, c.arithmetic, c.beta, c.mode, system="pytorch",
                            version="torch") for c in cells]
        acc = sorted({(c.method, True) for c in cells if c.name != "matmul"})
        for s in torch_systems:
            planned += _system_planned(s, o.args.dtype, "torch", o.betas)
            acc.append((s.name, s.smoothing))
        out.append(Job("pytorch", _spec(o, "pytorch", torch_systems, "pytorch", None, "torch"),
                       planned, _accuracy_keys(o, acc)))
    for s in o.systems:
        if s.package == "pytorch":
            summary[s.name] = _summary(s, o.args.dtype, "the installed torch")
            continue
        where = o.located[s.package]
        version = where.version if isinstance(where, Located) else where
        summary[s.name] = _summary(s, o.args.dtype, version)
        planned = _system_planned(s, o.args.dtype, version if isinstance(where, Located) else None,
                                  o.betas)
        if isinstance(where, str):
            rows = [r if "unsupported" in r else with_error(r, where) for r in planned]
            out.append(Job(s.name, None, rows))
        else:
            out.append(Job(s.name, _spec(o, "system", [s], s.package, where, version), planned,
                           _accuracy_keys(o, [(s.name, s.smoothing)])))
    return out, summary


def _summary(s: System, dtype: str, version: str) -> dict:
    return {"label": s.label, "package": s.package, "version": version,
            "arithmetic": arithmetic(s, dtype), "gradsInForward": s.grads_in_forward,
            "labelSmoothing": s.smoothing, "note": s.note}


def run_worker(spec: dict, timeout_s: float) -> WorkerResult:
    """Runs worker.py on a spec in its own process group, echoing its stderr; kills the group
    after timeout_s."""
    with tempfile.TemporaryDirectory(prefix="torch_peers_") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.jsonl")
        with open(spec_path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        proc = subprocess.Popen([sys.executable, WORKER, spec_path, out_path],
                                stderr=subprocess.PIPE, text=True, errors="replace",
                                start_new_session=True)
        tail: collections.deque[str] = collections.deque(maxlen=3)

        def echo() -> None:
            for line in proc.stderr:  # type: ignore[union-attr]
                sys.stderr.write(line)
                if line.strip():
                    tail.append(line.strip())

        reader = threading.Thread(target=echo, daemon=True)
        reader.start()
        try:
            status: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = None
        reader.join(timeout=5)
        records = []
        if os.path.exists(out_path):
            with open(out_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        break  # a line cut short by a kill: what came before stands
    return WorkerResult(records, status, list(tail))


def _why_missing(r: WorkerResult, timeout_s: float) -> str:
    if r.status is None:
        return f"not measured: the worker was stopped after {timeout_s:g} s (--timeout-s)"
    last = f": {r.stderr_tail[-1]}" if r.stderr_tail else ""
    return f"not measured: the worker ended with status {r.status}{last}"


Spawn = Callable[[dict, float], WorkerResult]


def _collect(job: Job, result: WorkerResult, timeout_s: float, env: dict, rows: list[dict],
             accuracy: list[dict], stats: dict[tuple, dict]) -> None:
    """Adds a worker's records, and the planned rows and entries it did not deliver with the
    reason."""
    got: dict[tuple, dict] = {}
    acc: dict[tuple, dict] = {}
    for rec in result.records:
        if "env" in rec and not env:
            env.update(rec["env"])
        if "row" in rec:
            got[(rec["row"]["method"], rec["row"]["beta"], rec["row"]["mode"])] = rec["row"]
        if "accuracy" in rec:
            acc.setdefault(accuracy_key(rec["accuracy"]), rec["accuracy"])
        if "fixtureStats" in rec:
            stats.setdefault((rec["fixtureStats"]["fixture"], rec["fixtureStats"]["beta"]),
                             rec["fixtureStats"])
    why = _why_missing(result, timeout_s)
    for p in job.planned:
        rows.append(got.pop((p["method"], p["beta"], p["mode"]), None) or with_error(p, why))
    rows.extend(got.values())
    for key in job.planned_accuracy:
        accuracy.append(acc.pop(key, None) or
                        {"method": key[0], "beta": key[1], "fixture": key[2], "error": why})
    accuracy.extend(acc.values())


def main(argv: list[str], spawn: Spawn = run_worker) -> int:
    """Runs the command; returns the exit status."""
    try:
        o = options(argv)
        todo, systems = jobs(o)
    except InputError as ex:
        print(f"error: {ex}", file=sys.stderr)
        return 2
    env: dict[str, Any] = {}
    rows: list[dict] = []
    accuracy: list[dict] = []
    stats: dict[tuple, dict] = {}
    for job in todo:
        if job.spec is None:
            rows.extend(job.planned)
            continue
        print(f"torch_peers: {job.name}", file=sys.stderr, flush=True)
        result = spawn(job.spec, o.args.timeout_s)
        fatal = [r["fatal"] for r in result.records if "fatal" in r]
        if fatal:
            print(f"error: {fatal[0]}", file=sys.stderr)
            return 2
        _collect(job, result, o.args.timeout_s, env, rows, accuracy, stats)
    env.setdefault("python", platform.python_version())
    env.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat())
    acc = None
    if o.accuracy is not None:
        acc = {"shape": {k: o.accuracy[k] for k in ("n", "v", "d", "dtype")},
               "seed": o.accuracy["seed"],
               "fixtures": {f: FIXTURES[f] for f in o.accuracy["fixtures"]},
               "entries": accuracy, "fixtureStats": list(stats.values())}
    shape = {"n": o.args.n, "v": o.args.v, "d": o.args.d, "dtype": o.args.dtype}
    write_json(o.args.out, document(env, shape, rows, acc, systems))
    print(f"wrote {o.args.out}", file=sys.stderr)
    return 0
