/**
 * The kernel manifest: every WGSL source the product and the tuning tools compile, as
 * `label → sha256(code)` per configuration, so that a change to the kernel layer can be shown to
 * leave the generated shaders byte-identical (or list the ones it changed).
 *
 * Each method of METHODS is prepared, run forward and backward on an emulated adapter
 * (testing/emulated_device.ts: nothing is compiled or executed, choices of tiles and variants are
 * the real ones) for every dtype, β ∈ {0, 0.1}, softcap off/on and reduction mean/none, at the
 * shapes the tests use on the software adapter (odd, aligned and sharded) and at the paper's
 * shape and a mid-size one on an emulated H100; the GEMM bench's tile candidates, the fused
 * forward tuner's candidates and the fused backward bench's configurations are added the same
 * way. Each kernel is captured where it is handed to `GpuContext.pipeline` / `pipelineNow`.
 *
 * `deno run -A testing/kernel_manifest.ts --out FILE.json [--codes DIR] [--compare OLD.json]`
 * writes the manifest (and with --codes every source as DIR/<sha>.wgsl); --compare prints how
 * many kernels are identical to OLD's and which labels changed, and exits 1 on a difference.
 * @module
 */
import { type ManifestRun, methodRuns } from "./kernel_capture.ts";
import { manifestExtras } from "./kernel_manifest_extras.ts";

/** The whole manifest. */
export interface Manifest {
  runs: ManifestRun[];
  /** sha → label and bytes of every distinct source. */
  kernels: Record<string, { label: string; bytes: number }>;
}

/** Builds the manifest: method runs and the tuning tools' kernels. */
export async function buildManifest(codes = new Map<string, string>()): Promise<Manifest> {
  const runs = [...await methodRuns(codes), ...await manifestExtras(codes)];
  const kernels: Manifest["kernels"] = {};
  for (const r of runs) {
    for (const line of r.kernels) {
      const [label, h] = _split(line);
      kernels[h] ??= { label, bytes: codes.get(h)!.length };
    }
  }
  return { runs, kernels };
}

function _split(line: string): [string, string] {
  const i = line.lastIndexOf(" ");
  return [line.slice(0, i), line.slice(i + 1)];
}

/** What differs between two manifests. */
export interface ManifestDiff {
  distinctBefore: number;
  distinctAfter: number;
  /** Distinct sources of `after` that `before` also has. */
  identical: number;
  /** Per label: sources of `before` no longer made, sources of `after` that are new. */
  changed: Record<string, { gone: string[]; added: string[] }>;
  /** Configurations whose skip reason or kernel labels differ. */
  runsDiffer: string[];
}

/** Compares two manifests kernel by kernel and configuration by configuration. */
export function compareManifests(before: Manifest, after: Manifest): ManifestDiff {
  const a = new Set(Object.keys(before.kernels)), b = new Set(Object.keys(after.kernels));
  const changed: ManifestDiff["changed"] = {};
  const entry = (label: string) => changed[label] ??= { gone: [], added: [] };
  for (const h of a) if (!b.has(h)) entry(before.kernels[h].label).gone.push(h);
  for (const h of b) if (!a.has(h)) entry(after.kernels[h].label).added.push(h);
  const byKey = new Map(after.runs.map((r) => [r.key, r]));
  const runsDiffer: string[] = [];
  for (const r of before.runs) {
    const s = byKey.get(r.key);
    const same = s !== undefined && s.skipped === r.skipped &&
      JSON.stringify(s.kernels) === JSON.stringify(r.kernels);
    if (!same) runsDiffer.push(r.key);
  }
  for (const r of after.runs) if (!before.runs.some((x) => x.key === r.key)) runsDiffer.push(r.key);
  return {
    distinctBefore: a.size,
    distinctAfter: b.size,
    identical: [...b].filter((h) => a.has(h)).length,
    changed,
    runsDiffer,
  };
}

async function _main(args: string[]): Promise<number> {
  const flag = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const out = flag("--out"), codesDir = flag("--codes"), old = flag("--compare");
  const codes = new Map<string, string>();
  const t0 = performance.now();
  const m = await buildManifest(codes);
  const secs = ((performance.now() - t0) / 1000).toFixed(0);
  const skipped = m.runs.filter((r) => r.skipped?.startsWith("error"));
  console.log(
    `${m.runs.length} configurations (${skipped.length} failed), ` +
      `${Object.keys(m.kernels).length} distinct kernels, ${secs} s`,
  );
  for (const r of skipped.slice(0, 10)) console.log(`  ${r.key}: ${r.skipped}`);
  if (out) await Deno.writeTextFile(out, JSON.stringify(m, null, 1) + "\n");
  if (codesDir) {
    await Deno.mkdir(codesDir, { recursive: true });
    for (const [h, code] of codes) await Deno.writeTextFile(`${codesDir}/${h}.wgsl`, code);
  }
  if (!old) return 0;
  const d = compareManifests(JSON.parse(await Deno.readTextFile(old)), m);
  console.log(
    `before ${d.distinctBefore} distinct kernels, after ${d.distinctAfter}, ` +
      `${d.identical} identical; ${d.runsDiffer.length} configurations differ`,
  );
  for (const [label, c] of Object.entries(d.changed)) {
    console.log(`  ${label}: ${c.gone.length} gone, ${c.added.length} new`);
  }
  return Object.keys(d.changed).length === 0 && d.runsDiffer.length === 0 ? 0 : 1;
}

if (import.meta.main) Deno.exit(await _main(Deno.args));
