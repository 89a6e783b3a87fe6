/**
 * Capturing the kernels of a configuration: methods prepared and recorded on an emulated adapter
 * (testing/emulated_device.ts) at the shapes and loss options the kernel manifest covers
 * (testing/kernel_manifest.ts), each WGSL source kept under its SHA-256.
 * @module
 */
import { type Dtype, type LceOptions, type Reduction, resolveOptions } from "../core/options.ts";
import { Recorder } from "../gpu/recorder.ts";
import { createTensor } from "../gpu/tensor.ts";
import type { GpuContext } from "../gpu/context.ts";
import type { Engine } from "../gpu/engine.ts";
import { METHODS } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import {
  type AdapterProfile,
  type CapturedKernel,
  emulatedContext,
  H100_PROFILE,
  SOFTWARE_PROFILE,
} from "./emulated_device.ts";

/**
 * A shape on an adapter profile, optionally with a lowered per-binding limit (sharding) and an
 * engine whose defaults differ (default `deno`).
 */
export interface ManifestTarget {
  name: string;
  profile: AdapterProfile;
  n: number;
  v: number;
  d: number;
  maxBindingBytes?: number;
  engine?: Engine;
}

/** The shapes of {@link methodRuns}. */
export const MANIFEST_TARGETS: ManifestTarget[] = [
  { name: "software-odd", profile: SOFTWARE_PROFILE, n: 37, v: 131, d: 29 },
  { name: "software-aligned", profile: SOFTWARE_PROFILE, n: 64, v: 256, d: 64 },
  {
    name: "software-sharded",
    profile: SOFTWARE_PROFILE,
    n: 37,
    v: 131,
    d: 32,
    maxBindingBytes: 4096,
  },
  { name: "h100-paper", profile: H100_PROFILE, n: 8192, v: 256000, d: 2304 },
  { name: "h100-llm", profile: H100_PROFILE, n: 4096, v: 32000, d: 1024 },
  { name: "h100-llm-dawn", profile: H100_PROFILE, n: 4096, v: 32000, d: 1024, engine: "dawn" },
];

/** One configuration's kernels: `label sha` lines in capture order. */
export interface ManifestRun {
  key: string;
  kernels: string[];
  /** Why the configuration did not run (unsupported, or an error). */
  skipped?: string;
}

/** SHA-256 of a source, hex. */
export async function sha256(code: string): Promise<string> {
  const h = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(code));
  return [...new Uint8Array(h)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Loss options of every method configuration. */
export function optionGrid(): { tag: string; dtype: Dtype; opts: LceOptions }[] {
  const out: { tag: string; dtype: Dtype; opts: LceOptions }[] = [];
  for (const dtype of ["f32", "bf16", "f16"] as const) {
    for (const beta of [0, 0.1]) {
      for (const softcap of [undefined, 30]) {
        for (const reduction of ["mean", "none"] as Reduction[]) {
          const tag = `${dtype} β=${beta} softcap=${softcap ?? "off"} ${reduction}`;
          out.push({ tag, dtype, opts: resolveOptions({ beta, softcap, reduction }) });
        }
      }
    }
  }
  return out;
}

/** Prepares `method`, records a forward and a backward; the kernels it compiled. */
export async function runMethodKernels(
  ctx: GpuContext,
  method: LceMethod,
  spec: { n: number; v: number; d: number; dtype: Dtype },
  opts: LceOptions,
): Promise<void> {
  const p = await method.prepare(ctx, spec, opts);
  const mk = (dtype: Dtype | "i32" | "f32", rows: number, cols: number, label: string) =>
    createTensor(ctx, { dtype, rows, cols, role: "input", label });
  const x = {
    e: mk(spec.dtype, spec.n, spec.d, "E"),
    c: mk(spec.dtype, spec.v, spec.d, "C"),
    targets: mk("i32", spec.n, 1, "targets"),
  };
  const gradOut = mk("f32", opts.reduction === "none" ? spec.n : 1, 1, "grad out");
  const rec = new Recorder(ctx);
  const f = await p.forward(rec, x);
  await p.backward(rec, x, f.saved, gradOut);
  await rec.finish();
  p.dispose(f.saved);
  p.release?.();
}

/** Every method configuration on every target; `codes` collects each source by its hash. */
export async function methodRuns(
  codes: Map<string, string>,
  o: { targets?: ManifestTarget[]; methods?: readonly LceMethod[] } = {},
): Promise<ManifestRun[]> {
  const runs: ManifestRun[] = [];
  for (const t of o.targets ?? MANIFEST_TARGETS) {
    for (const method of o.methods ?? METHODS) {
      for (const { tag, dtype, opts } of optionGrid()) {
        const key = `${t.name} ${method.name} ${tag}`;
        const em = emulatedContext(t.profile, {
          maxBindingBytes: t.maxBindingBytes,
          engine: t.engine,
        });
        const spec = { n: t.n, v: t.v, d: t.d, dtype };
        const why = method.unsupported?.(em.ctx, spec, opts);
        if (why !== undefined) {
          runs.push({ key, kernels: [], skipped: why });
          continue;
        }
        try {
          await runMethodKernels(em.ctx, method, spec, opts);
          runs.push({ key, kernels: await collect(em.kernels, codes) });
        } catch (e) {
          runs.push({ key, kernels: [], skipped: `error: ${(e as Error).message.split("\n")[0]}` });
        }
      }
    }
  }
  return runs;
}

/** The captured kernels as `label sha` lines, their sources added to `codes`. */
export async function collect(
  kernels: CapturedKernel[],
  codes: Map<string, string>,
): Promise<string[]> {
  const lines: string[] = [];
  for (const k of kernels) {
    const h = await sha256(k.code);
    codes.set(h, k.code);
    lines.push(`${k.label} ${h}`);
  }
  return lines;
}
