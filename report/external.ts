/**
 * Rows measured outside this harness on the same card — the PyTorch baseline, torch.compile and
 * chunked rows of `scripts/torch_reference.py` — read from its JSON so a Table 3 report can show
 * WebGPU and PyTorch side by side, clearly labelled as external.
 * @module
 */
import { readFileSync } from "node:fs";
import { check, InputError } from "../core/errors.ts";

/** One external cell (same units as the harness: bytes and milliseconds). */
export interface ExternalRow {
  method: string;
  label?: string;
  beta: number;
  mode: "fwd" | "bwd" | "fwd+bwd";
  peakBytes?: number | null;
  timeMs?: number | null;
  timeMsMin?: number;
  timeMsMax?: number;
  error?: string;
  /** The arithmetic of its products, e.g. "bf16 tensor cores" or "fp32 FMA (TF32 off)". */
  arithmetic?: string;
  external: true;
}

/** An external rows file. */
export interface ExternalRows {
  /** Where the rows come from (the file given). */
  source: string;
  env: Record<string, unknown>;
  shape: { n: number; v: number; d: number; dtype: string };
  fixture: string;
  rows: ExternalRow[];
}

/** Reads and validates an external rows file; InputError naming the file otherwise. */
export function readExternalRows(path: string): ExternalRows {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new InputError(
      `${path}: cannot read external rows: ${(e as Error).message.split("\n")[0]}`,
    );
  }
  const x = raw as Partial<ExternalRows>;
  check(x && typeof x === "object" && Array.isArray(x.rows), `${path}: no "rows" array`);
  check(x.shape && typeof x.shape.n === "number", `${path}: no "shape" {n, v, d, dtype}`);
  for (const [i, r] of x.rows!.entries()) {
    check(
      typeof r.method === "string" && typeof r.beta === "number" &&
        ["fwd", "bwd", "fwd+bwd"].includes(r.mode),
      `${path}: row ${i} lacks method, beta or mode`,
    );
    r.external = true;
  }
  return {
    source: path.split("/").pop() ?? path,
    env: x.env ?? {},
    shape: x.shape!,
    fixture: x.fixture ?? "?",
    rows: x.rows!,
  };
}
