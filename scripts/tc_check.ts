/**
 * `deno run -A scripts/tc_check.ts [--out FILE.json]`: the correctness run of the tensor-core rows
 * on a GPU, whose log is committed. Dawn distrusts f16 on NVIDIA drivers older than 615.71 and
 * enables it here only by a toggle, so the tensor-core numbers count once this passes on the card:
 *
 * 1. the semantics probe (kernels/tc/tc_probe.ts: the subgroup-matrix builtins' layouts,
 *    strides, operand roles and f16 conversions against what the emulation assumes), then every
 *    tensor-core kernel compiled for the adapter (kernels/tc/tc_catalog.ts);
 * 2. the products of the methods (E·Cᵀ, G·C and Gᵀ·E with G split, split-K, accumulation) against
 *    float64 products at odd shapes (kernels/tc/tc_product_check.ts);
 * 3. each tensor-core method against the float64 reference (reference/lce_reference.ts) with the
 *    parity tolerances of testing/parity.ts: odd shapes over bf16/f16, β ∈ {0, 0.1, 1}, softcap,
 *    every reduction and ignored rows, a filtered case on the cce recipe;
 * 4. bitwise determinism: each method twice on the filtered case;
 * 5. (unless --small) the vocabularies of GPT-2 (50,257 × 768) and Llama 3 (128,256 × 4096) at a
 *    few tokens, last since they take a minute or two each (most of it the float64 reference).
 *
 * One line per check on stdout; exit 1 when any fails (the lines say which and by how much).
 * `--out` is rewritten after each step, "complete": false until the end, so a run stopped by a
 * time limit keeps the lines it reached.
 * @module
 */
import { ADAPTER_FLAG, defineCommand, parseList, runCli, WEBGPU_FLAG } from "../core/cli.ts";
import { checkOutputs, writeAllOrNothing } from "../io/outputs.ts";
import { type AdapterChoice, GpuContext } from "../gpu/context.ts";
import { parseEngine } from "../gpu/engine.ts";
import { methodByName } from "../methods/mod.ts";
import type { LceMethod } from "../methods/types.ts";
import { baselineTcMethod } from "../methods/baseline_tc.ts";
import { fusedTcMethod } from "../methods/fused_tc.ts";
import { InputError } from "../core/errors.ts";
import type { TcMode } from "../kernels/tc/tc_codegen.ts";
import { compileCatalog } from "../kernels/tc/tc_catalog.ts";
import { runProbe } from "../kernels/tc/tc_probe.ts";
import { checkProduct } from "../kernels/tc/tc_product_check.ts";
import { tcSupport } from "../kernels/tc/tc_tiles.ts";
import {
  checkCases,
  checkDeterminism,
  checkTaken,
  tcCheckCases,
  type TcCheckLine,
  tcCheckProducts,
} from "../testing/tc_gpu_check.ts";

/** The command line of `tc_check.ts`. */
export const TC_CHECK_COMMAND = defineCommand({
  name: "deno run -A scripts/tc_check.ts",
  summary: "Compiles every tensor-core kernel for the adapter and checks the tensor-core " +
    "products and methods against float64 (odd shapes, every β, softcap, ignore_index, real " +
    "vocabularies) and for bitwise determinism.",
  flags: {
    methods: {
      type: "string",
      arg: "M1,M2",
      help: "methods to check (`fused-tilemap-tc-refined`: its map always refined; " +
        "`fused-tc-dense`: its filter stopped after its sample, its dense dE and dense dC " +
        "always taken; `fused-tilemap-tc-dense`: the same, with its map's refine)",
      default:
        "baseline-tc,fused-tc,fused-tilemap-tc,fused-tilemap-tc-refined,fused-tc-dense,fused-tilemap-tc-dense",
    },
    small: { type: "boolean", help: "leave out the real-vocabulary cases" },
    emulate: {
      type: "boolean",
      help: "run the emulated kernels (to try the check itself where no tensor cores are)",
    },
    out: { type: "string", arg: "FILE", help: "write the lines as JSON here" },
    webgpu: { ...WEBGPU_FLAG, default: "dawn" },
    adapter: ADAPTER_FLAG,
  },
});

/** The emulation's tile (32 KiB of workgroup memory on lavapipe). */
const EMULATED = { sgRows: 2, sgCols: 2, mt: 2, nt: 1, bk: 16 };

/**
 * A tensor-core method by name, native or emulated; `fused-tilemap-tc-refined` is the tile-map row
 * with its refine (the tensor-core filter over every tile) always taken and `fused-tc-dense`
 * `fused-tc` with its filter stopped after its sample and its tensor-core dense dE and dense dC
 * always taken, which the small cases would not take by themselves ({@link _TAKEN}: a run that did not take them fails);
 * `fused-tilemap-tc-dense` the same for the tile-map row, its refine always taken and stopped
 * after its sample.
 */
function _method(name: string, mode: TcMode): LceMethod {
  if (name === "fused-tilemap-tc-refined") {
    const f = { name, label: name, description: name, sort: false, tileMap: true, mode };
    return fusedTcMethod(f, { backward: { mapRefine: "always" } });
  }
  if (name === "fused-tc-dense" || name === "fused-tilemap-tc-dense") {
    const map = name === "fused-tilemap-tc-dense";
    const f = { name, label: name, description: name, sort: !map, tileMap: map, mode };
    const backward = {
      denseDE: "always",
      denseDC: "always",
      filterSample: "always",
      ...(map ? { mapRefine: "always" as const } : {}),
    } as const;
    return fusedTcMethod(f, { backward });
  }
  if (mode === "native") return methodByName(name);
  if (name === "baseline-tc") return baselineTcMethod({ name, mode });
  if (name === "fused-tc" || name === "fused-tilemap-tc") {
    const map = name === "fused-tilemap-tc";
    return fusedTcMethod({ name, label: name, description: name, sort: !map, tileMap: map, mode });
  }
  throw new InputError(`--methods: '${name}' is not a tensor-core method (--emulate)`);
}

/** The stats the forcing methods must show taken. */
const _TAKEN: Record<string, string[]> = {
  "fused-tilemap-tc-refined": ["mapRefined"],
  "fused-tc-dense": ["filterSampled", "denseDE", "denseDC"],
  "fused-tilemap-tc-dense": ["mapRefined", "filterSampled", "denseDE", "denseDC"],
};

/** Runs the command with `args`. */
export async function tcCheckMain(args: string[]): Promise<number> {
  const parsed = TC_CHECK_COMMAND.parse(args);
  if (!parsed) return 0;
  const v = parsed.values;
  const mode = v.emulate ? "emulated" as const : "native" as const;
  const methods = parseList("--methods", v.methods).map((n) => _method(n, mode));
  if (v.out !== undefined) checkOutputs([v.out]);
  const ctx = await GpuContext.create({
    engine: parseEngine(v.webgpu),
    adapter: v.adapter as AdapterChoice,
    poison: true,
  });
  const rep = ctx.report, sup = tcSupport(ctx);
  console.log(
    `adapter: ${rep.description} (${rep.engineVersion}), subgroup size ${sup.sgSize}, ` +
      `features ${rep.features.filter((f) => /f16|subgroup/.test(f)).join(" ")}`,
  );
  const lines: TcCheckLine[] = [];
  const log = (l: TcCheckLine) => {
    lines.push(l);
    console.log(
      `${l.ok ? "PASS" : "FAIL"} ${l.method.padEnd(18)} ${l.case}: ${l.detail} (${
        (l.ms / 1000).toFixed(1)
      } s)`,
    );
  };
  if (sup.reason && !v.emulate) {
    log({ method: "tensor cores", case: "support", ok: false, detail: sup.reason, ms: 0 });
  } else {
    if (!v.emulate) {
      for (const r of (await runProbe(ctx)).results) {
        log({ method: "probe", case: r.name, ok: r.ok, detail: r.line, ms: 0 });
      }
    }
    for (const k of v.emulate ? [] : await compileCatalog(ctx)) {
      log({ method: "compile", case: k.name, ok: !k.error, detail: k.error ?? "ok", ms: k.ms });
    }
    for (const p of tcCheckProducts()) {
      const t0 = performance.now();
      try {
        const r = await checkProduct(
          ctx,
          v.emulate ? { ...p, kernel: { ...p.kernel, mode, tile: EMULATED } } : p,
        );
        log({
          method: "product",
          case: p.name,
          ok: r.ok,
          detail: `worst ${r.worst.toFixed(3)} of the bound ${JSON.stringify(r.variant)}`,
          ms: performance.now() - t0,
        });
      } catch (e) {
        log({
          method: "product",
          case: p.name,
          ok: false,
          detail: `error: ${(e as Error).message.split("\n")[0]}`,
          ms: performance.now() - t0,
        });
      }
    }
  }
  // the lines so far, rewritten after each step ("complete": false until the end), so a run
  // stopped by a time limit keeps what it checked
  const env = {
    adapter: rep.description,
    engine: rep.engineVersion,
    sgSize: sup.sgSize,
    date: new Date().toISOString(),
  };
  const save = async (complete: boolean) => {
    if (v.out === undefined) return;
    const bytes = JSON.stringify({ env, complete, lines }, null, 1);
    await writeAllOrNothing([{ path: v.out, bytes }]);
  };
  await save(false);
  // the small cases and determinism first; the real vocabularies (a minute or two each, most of
  // it the float64 reference) last
  const small = tcCheckCases({ large: false });
  await checkCases(ctx, methods, small, log, _TAKEN);
  await checkDeterminism(ctx, methods, small.find((c) => c.recipe === "cce")!, log);
  await save(false);
  const large = v.small
    ? []
    : tcCheckCases({ large: true }).filter((c) => !small.some((s) => s.name === c.name));
  for (const c of large) {
    await checkCases(ctx, methods, [c], log, _TAKEN);
    await save(false);
  }
  ctx.destroy();
  checkTaken(lines, methods, _TAKEN, log);
  const failed = lines.filter((l) => !l.ok).length;
  console.log(`${lines.length - failed} passed, ${failed} failed`);
  await save(true);
  return failed > 0 ? 1 : 0;
}

if (import.meta.main) await runCli(() => tcCheckMain(Deno.args));
