"""A worker process: measures one job (the PyTorch rows, or one external system) and appends
what it measures to a JSON-lines file as it goes, so a worker that hangs or crashes loses only
the cells it had not finished.

usage (started by cli.py): python3 scripts/peers/worker.py SPEC.json OUT.jsonl

Records: {"env": …} first, then {"row": …}, {"accuracy": …}, {"fixtureStats": …}; {"fatal": …}
(exit status 3) when torch or a CUDA device is missing.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

if __name__ == "__main__":
    # run as a script: import the peers package from scripts/, not this folder's modules by name
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from peers.adapters import FilterSpy, Unavailable, load  # noqa: E402
from peers.rows import (  # noqa: E402
    base_row, finite, one_line, planned_cells, system_row, unsupported_row, with_error,
    with_timings)
from peers.systems import PACKAGES, SYSTEMS, System, arithmetic, torch_cells  # noqa: E402

Emit = Callable[[dict], None]


class Failed:
    """A system whose package could not be imported: every cell fails with this reason."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _progress(row: dict) -> None:
    what = row.get("timeMs", row.get("error", row.get("unsupported")))
    print(f"{row['method']} beta={row['beta']} {row['mode']}: {what}", file=sys.stderr, flush=True)


def system_rows(system: System, fn: Any, spec: dict, bench: Any, data: Any, emit: Emit) -> None:
    """Every cell of one system: measured, failed (with the reason), or not supported."""
    arith = arithmetic(system, spec["dtype"])
    for beta, mode, why in planned_cells(system, spec["betas"]):
        if why is None and isinstance(fn, Unavailable):
            why = fn.reason
        if why is not None:
            row = unsupported_row(system, arith, spec["version"], beta, mode, why)
        else:
            row = system_row(system, arith, spec["version"], beta, mode)
            if isinstance(fn, Failed):
                with_error(row, fn.reason)
            else:
                try:
                    times, peaks = bench.measure_cell(fn, beta, mode, data, spec["reps"],
                                                      spec["warmup"])
                    with_timings(row, times, peaks, spec["reps"], spec["warmup"])
                except Exception as ex:  # noqa: BLE001  (a failing system is a row)
                    with_error(row, bench.failure_reason(ex))
        _progress(row)
        emit({"row": row})


def accuracy(items: list[tuple[str, Any, bool, bool]], spec: dict, bench: Any,
             emit: Emit) -> None:
    """Accuracy entries of (method, function, has label smoothing, upcast to fp32) at the
    accuracy shape, per fixture and β, against float64; one float64 reference per fixture and
    β shared by all items."""
    acc = spec["accuracy"]
    runnable = [x for x in items if callable(x[1])]
    for method, fn, smoothing, _ in [x for x in items if not callable(x[1])]:
        for fixture in acc["fixtures"]:
            for beta in [b for b in spec["betas"] if b == 0 or smoothing]:
                entry = {"method": method, "beta": beta, "fixture": fixture}
                if isinstance(fn, Unavailable):
                    entry["unsupported"] = fn.reason
                else:
                    entry["error"] = fn.reason
                emit({"accuracy": entry})
    for fixture in acc["fixtures"]:
        data = bench.make_data(acc["n"], acc["v"], acc["d"], spec["dtype"], acc["seed"],
                               offset=fixture == "cce-offset")
        for beta in spec["betas"]:
            todo = [x for x in runnable if beta == 0 or x[2]]
            if not todo:
                continue
            try:
                ref = bench.reference(data, beta, bench.DTYPES[spec["dtype"]])
                emit({"fixtureStats": {"fixture": fixture, "beta": beta, **ref.stats}})
            except Exception as ex:  # noqa: BLE001
                ref, why = None, bench.failure_reason(ex)
            for method, fn, _, upcast in todo:
                entry: dict[str, Any] = {"method": method, "beta": beta, "fixture": fixture}
                try:
                    if ref is None:
                        raise RuntimeError(f"float64 reference failed: {why}")
                    bench.set_tf32(spec["tf32"] and not upcast)
                    with FilterSpy() as spy:
                        entry.update(bench.accuracy_entry(
                            fn, bench.upcast(data) if upcast else data, beta, ref))
                    if spy.summary() is not None:
                        entry["kernel"] = spy.summary()
                except Exception as ex:  # noqa: BLE001
                    entry["error"] = one_line(bench.failure_reason(ex))
                print(f"accuracy {method} beta={beta} {fixture}: "
                      f"{entry.get('error') or entry.get('dE')}", file=sys.stderr, flush=True)
                emit({"accuracy": entry})
        del data


def run_systems(spec: dict, bench: Any, emit: Emit, torch: Any) -> None:
    """The job's external systems: timings at the problem's shape, then accuracy."""
    systems = [SYSTEMS[n] for n in spec["systems"]]
    names = [s.name for s in systems]
    try:
        fns: dict[str, Any] = load(spec["package"], spec["path"], names, torch)
    except Exception as ex:  # noqa: BLE001  (an import failure is every row's reason)
        pkg = PACKAGES.get(spec["package"])
        where = f" from {spec['path']}" if spec["path"] else ""
        why = f"cannot import {pkg.module if pkg else spec['package']}{where}: " + \
            one_line(f"{type(ex).__name__}: {ex}")
        fns = {n: Failed(why) for n in names}
    if any(callable(f) for f in fns.values()):
        data = bench.make_data(spec["n"], spec["v"], spec["d"], spec["dtype"], spec["seed"])
    else:
        data = None
    for s in systems:
        system_rows(s, fns[s.name], spec, bench, data, emit)
    del data
    bench.free()
    if spec["accuracy"]:
        accuracy([(s.name, fns[s.name], s.smoothing, False) for s in systems], spec, bench, emit)


def run_pytorch(spec: dict, bench: Any, emit: Emit, version: str) -> None:
    """The PyTorch rows (same cells, labels and memory rule as ever), then their accuracy."""
    methods = bench.pytorch_methods()
    cells = torch_cells(spec["methods"], spec["ariths"], spec["fp32Methods"], spec["betas"],
                        spec["dtype"])
    data = bench.make_data(spec["n"], spec["v"], spec["d"], spec["dtype"], spec["seed"])
    for arith in spec["ariths"]:
        # fp32: the same values upcast, TF32 off whatever --tf32 says
        bench.set_tf32(spec["tf32"] and arith != "fp32")
        d = bench.upcast(data) if arith == "fp32" else data
        for cell in [x for x in cells if x.arith == arith]:
            row = base_row(cell.method, cell.label, cell.arithmetic, cell.beta, cell.mode,
                           system="pytorch", version=version)
            if cell.name == "matmul":
                row["flop"] = 2 * spec["n"] * spec["v"] * spec["d"]
            try:
                times, peaks = bench.measure_cell(methods[cell.name], cell.beta, cell.mode, d,
                                                  spec["reps"], spec["warmup"],
                                                  grad=cell.name != "matmul")
                with_timings(row, times, peaks, spec["reps"], spec["warmup"])
            except Exception as ex:  # noqa: BLE001
                with_error(row, bench.failure_reason(ex))
            _progress(row)
            emit({"row": row})
        del d
    del data
    bench.free()
    if spec["accuracy"]:
        seen = {(c.method, c.name, c.arith) for c in cells if c.name != "matmul"}
        accuracy([(m, methods[n], True, a == "fp32") for m, n, a in sorted(seen)], spec, bench,
                 emit)


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    with open(out_path, "a", encoding="utf-8") as out:
        def emit(record: dict) -> None:
            out.write(json.dumps(finite(record), ensure_ascii=False, allow_nan=False) + "\n")
            out.flush()

        try:
            import torch  # noqa: PLC0415  (the parent process never imports torch)
        except Exception as ex:  # noqa: BLE001
            emit({"fatal": f"PyTorch cannot be imported here: {one_line(str(ex))}"})
            return 3
        if not torch.cuda.is_available():
            emit({"fatal": "no CUDA device"})
            return 3
        from peers import bench  # noqa: PLC0415

        emit({"env": bench.environment(spec["tf32"], spec["ariths"])})
        if spec["job"] == "pytorch":
            spec["version"] = f"torch {torch.__version__}"
            run_pytorch(spec, bench, emit, spec["version"])
        if spec["systems"]:
            run_systems(spec, bench, emit, torch)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
