#!/usr/bin/env python3
"""Same-card PyTorch reference rows for the Table 3 report.

Measures, on the GPU host's own PyTorch, the rows the paper compares against: the materialised
baseline (torch.nn.functional.cross_entropy on logits.float()), torch.compile of the same function,
and torchtune-style chunked cross-entropy (8 chunks), and the product logits = E·Cᵀ alone
(`matmul`: mode fwd only), for one shape, dtype, beta and the Cut
Cross-Entropy benchmark's data recipe (E = randn/d^0.25, C = randn/d^0.25, C[:n] = E, targets
uniform). Memory is peak allocated bytes above what was live before the call (torch.cuda
max_memory_allocated), time the median of CUDA-event timings. Writes JSON that
`deno task table3 --external FILE` merges as clearly labelled external rows.

Each method runs in each arithmetic of --arith: `bf16` (the inputs in --dtype, products on tensor
cores: the paper's setting) and `fp32` (the same values upcast to float32 with TF32 off: FMA in
fp32, the same arithmetic as this project's WGSL kernels, which cannot reach tensor cores). The
fp32 rows are named `torch-<method>-fp32`; every row carries `arithmetic`.

usage: python3 scripts/torch_reference.py --out reports/torch_h200.json [--n 8192 --v 256000
       --d 2304 --dtype bf16 --beta 0.1 --reps 10 --warmup 3
       --methods baseline,compiled,chunked,matmul --arith bf16,fp32]
"""
import argparse
import datetime
import json
import os
import statistics
import sys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--v", type=int, default=256000)
    ap.add_argument("--d", type=int, default=2304)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--beta", type=float, action="append")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--methods", default="baseline,compiled,chunked,matmul")
    ap.add_argument("--arith", default="bf16,fp32", help="bf16 (tensor cores), fp32 (TF32 off)")
    ap.add_argument("--fp32-methods", default="baseline,chunked,matmul",
                    help="methods also measured in fp32 arithmetic")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in fp32 matmuls (off by default)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    betas = a.beta or [0.1, 0.0]
    for b in betas:
        if not 0.0 <= b <= 1.0:
            print(f"error: beta must be in [0, 1], got {b}", file=sys.stderr)
            sys.exit(2)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("error: PyTorch is not installed here", file=sys.stderr)
        sys.exit(2)
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        sys.exit(2)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    n, v, d = a.n, a.v, a.d
    e0 = (torch.randn(n, d, device=dev, generator=g) / d**0.25).to(dt)
    c0 = (torch.randn(v, d, device=dev, generator=g) / d**0.25).to(dt)
    c0[: min(n, v)] = e0[: min(n, v)]
    t = torch.randint(0, v, (n,), device=dev, generator=g)

    def baseline(e, c, beta):
        logits = (e @ c.T).float()
        return F.cross_entropy(logits, t, label_smoothing=beta)

    compiled = torch.compile(baseline)

    def chunked(e, c, beta, chunks=8):
        # torchtune's CEWithChunkedOutputLoss: all chunks' logits exist, each upcast and reduced
        logits = [ec @ c.T for ec in e.chunk(chunks)]
        ts = t.chunk(chunks)
        total = sum(
            F.cross_entropy(lc.float(), tc, reduction="sum", label_smoothing=beta)
            for lc, tc in zip(logits, ts)
        )
        return total / (t != -100).sum()

    def matmul(e, c, beta):
        return e @ c.T

    fns = {"baseline": baseline, "compiled": compiled, "chunked": chunked, "matmul": matmul}
    labels = {
        "baseline": "PyTorch baseline (cross_entropy on logits.float())",
        "compiled": "PyTorch torch.compile",
        "chunked": "PyTorch chunked CE (torchtune, 8 chunks)",
        "matmul": "PyTorch matmul E·Cᵀ alone",
    }
    arith_label = {"bf16": f"{a.dtype} tensor cores" if a.dtype != "f32" else "fp32",
                   "fp32": "fp32 FMA (TF32 off)"}
    rows = []

    def timed(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        return start.elapsed_time(end), peak, out

    def measure(fn, name, arith, beta, mode, e0, c0):
        times, peaks, err = [], [], None
        try:
            for i in range(a.warmup + a.reps):
                e = e0.clone().requires_grad_(name != "matmul")
                c = c0.clone().requires_grad_(name != "matmul")
                if mode == "fwd":
                    # autograd on: the forward keeps what the backward needs, as in the paper
                    ms, peak, loss = timed(lambda: fn(e, c, beta))
                    del loss
                elif mode == "bwd":
                    loss = fn(e, c, beta)
                    ms, peak, _ = timed(lambda: loss.backward())
                    del loss
                else:
                    def fb():
                        loss = fn(e, c, beta)
                        loss.backward()
                        return loss
                    ms, peak, _ = timed(fb)
                del e, c
                if i >= a.warmup:
                    times.append(ms)
                    peaks.append(peak)
        except torch.cuda.OutOfMemoryError as ex:
            err = f"OOM: {str(ex).splitlines()[0]}"
            torch.cuda.empty_cache()
        row = {
            "method": f"torch-{name}" + ("-fp32" if arith == "fp32" else ""),
            "label": labels[name] + (", fp32" if arith == "fp32" else ""),
            "arithmetic": arith_label[arith],
            "beta": beta,
            "mode": mode,
            "external": True,
            "timeSource": "cuda-event",
        }
        if name == "matmul":
            row["flop"] = 2 * n * v * d
        if err:
            row["error"] = err
        else:
            row.update(
                timeMs=statistics.median(times),
                timeMsMin=min(times),
                timeMsMax=max(times),
                samplesMs=times,
                peakBytes=max(peaks),
                reps=a.reps,
                warmup=a.warmup,
            )
        print(f"{row['method']} beta={beta} {mode}: {row.get('timeMs', err)}", file=sys.stderr)
        return row

    ariths = [x for x in a.arith.split(",") if x]
    for x in ariths:
        if x not in arith_label:
            print(f"error: unknown arithmetic '{x}' (bf16, fp32)", file=sys.stderr)
            sys.exit(2)
    fp32_methods = set(a.fp32_methods.split(","))
    for name in a.methods.split(","):
        if name not in fns:
            print(f"error: unknown method '{name}'", file=sys.stderr)
            sys.exit(2)
    for arith in ariths:
        # fp32: the same values upcast, TF32 off whatever --tf32 says
        torch.backends.cuda.matmul.allow_tf32 = a.tf32 and arith != "fp32"
        torch.backends.cudnn.allow_tf32 = a.tf32 and arith != "fp32"
        ea, ca = (e0.float(), c0.float()) if arith == "fp32" else (e0, c0)
        for name in a.methods.split(","):
            if arith == "fp32" and name not in fp32_methods:
                continue
            fn = fns[name]
            for beta in betas if name != "matmul" else [betas[0]]:
                modes = ["fwd"] if name == "matmul" else ["fwd", "bwd", "fwd+bwd"]
                for mode in modes:
                    rows.append(measure(fn, name, arith, beta, mode, ea, ca))
    out = {
        "env": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "device": torch.cuda.get_device_name(0),
            "tf32": a.tf32,
            "arith": ariths,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        },
        "shape": {"n": n, "v": v, "d": d, "dtype": a.dtype},
        "fixture": "cce",
        "rows": rows,
    }
    tmp = a.out + ".tmp"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, a.out)
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
