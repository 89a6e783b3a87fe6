/**
 * The subgroup-matrix operations of the tensor-core kernels, native or emulated ({@link TcMode}):
 * enable directives, entry-point builtins, accumulator stores, and the emulation's accumulators
 * and functions (kernels/tc/tc_codegen.ts emits the multiply-accumulates and loads).
 * @module
 */
import type { TcMainloopOptions } from "./tc_codegen.ts";
import { type TcTile, tileMma, tileSubgroups } from "./tc_tiles.ts";

/**
 * `native`: Dawn's subgroup-matrix builtins. `emulated`: the same kernel with each subgroup's
 * accumulators in workgroup memory and the multiply-accumulates, matrix stores and zeroing done
 * by plain WGSL loops (an invocation owns the elements e ≡ its lane mod the subgroup size), and
 * the subgroup and lane taken as lid / sgSize and lid mod sgSize: every staging, offset, layout
 * and epilogue line is the native kernel's, so running the emulation on any adapter (lavapipe in
 * CI) checks all of it but the builtins themselves, whose semantics it implements as Dawn's
 * specification states them (docs/tensor_cores.md).
 */
export type TcMode = "native" | "emulated";

/** Name of an emulation function of the product with prefix `p`. */
export function emuName(p: string, what: string, arr: string): string {
  return `${p}emu_${what}_${arr}`;
}

/** The emulated accumulator (i, j)'s slot (u32 expression: the subgroup's own slots). */
export function emuSlot(t: TcTile, i: number, j: number): string {
  return `(sg * ${t.mt * t.nt}u + ${i * t.nt + j}u)`;
}

/** `enable` directives of a tensor-core kernel (f16 only when emulated). */
export function tcEnables(mode: TcMode = "native"): string {
  return mode === "emulated"
    ? "enable f16;"
    : "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;";
}

/**
 * The entry point's parameters besides lid and wg: `sg` (subgroup_id) and `sl`
 * (subgroup_invocation_id) natively; nothing when emulated (see {@link tcLanePrelude}).
 */
export function tcEntryParams(mode: TcMode = "native"): string {
  return mode === "emulated"
    ? ""
    : ", @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) sl: u32";
}

/** Emulated: statements defining `sg` and `sl` from lid; natively nothing. */
export function tcLanePrelude(mode: TcMode | undefined, sgSize: number): string {
  if (mode !== "emulated") return "";
  return `let sg = lid / ${sgSize}u;
  let sl = lid % ${sgSize}u;
  if (lid == 0u) { emu_dims = EMU_DIMS; }
  workgroupBarrier();`;
}

/**
 * A statement storing accumulator (i, j), times `factor` (f32 expression) when given, into the
 * f32 array `buf` (a module-scope variable listed in {@link TcMainloopOptions} `emuTargets` when
 * emulated) at element `off`, row-major with row stride `stride` (u32 expressions; uniform).
 */
export function tcStoreAcc(
  o: TcMainloopOptions,
  acc: { i: number; j: number },
  buf: string,
  off: string,
  stride: string,
  factor?: string,
): string {
  const p = o.prefix ?? "";
  if (o.mode === "emulated") {
    return `${emuName(p, "store", buf)}(${emuSlot(o.tile, acc.i, acc.j)}, ${off}, ${stride}, ${
      factor ?? "1.0"
    }, sl);`;
  }
  const name = `${p}acc_${acc.i}_${acc.j}`;
  const value = factor ? `subgroupMatrixScalarMultiply(${name}, ${factor})` : name;
  return `subgroupMatrixStore<row_major>(&${buf}, ${off}, ${value}, ${stride});`;
}

/** The WGSL type of a result matrix of the tile's MMA shape. */
export function tcResultType(t: TcTile): string {
  const m = tileMma(t);
  return `subgroup_matrix_result<f32, ${m.n}, ${m.m}>`;
}

/**
 * A statement loading accumulator (i, j) from the f32 array `buf` (a module-scope variable listed
 * in the emulation's `loadSources`) at element `off`, row-major with row stride `stride` (u32
 * expressions; uniform), times `factor` (f32 expression): it then holds those values instead of
 * zeros.
 */
export function tcLoadAcc(
  o: TcMainloopOptions,
  acc: { i: number; j: number },
  buf: string,
  off: string,
  stride: string,
  factor: string,
): string {
  const p = o.prefix ?? "";
  if (o.mode === "emulated") {
    return `${emuName(p, "load", buf)}(${
      emuSlot(o.tile, acc.i, acc.j)
    }, ${off}, ${stride}, ${factor}, sl);`;
  }
  const type = tcResultType(o.tile);
  return `${p}acc_${acc.i}_${acc.j} = subgroupMatrixScalarMultiply(subgroupMatrixLoad<${type}, row_major>(&${buf}, ${off}, ${stride}), ${factor});`;
}

/**
 * The emulation's module-scope code: the accumulators (workgroup memory, a subgroup's own slots),
 * a multiply-accumulate function per staged left array, zeroing, a store per target array.
 */
export function emulationDecls(
  o: TcMainloopOptions & {
    left: string[];
    right: string;
    storeTargets: string[];
    /** Arrays accumulators are loaded from ({@link tcLoadAcc}). */
    loadSources?: string[];
    /** Whether A's and B's staging arrays are flat (else an array of sub-arrays, asub/bsub). */
    flat: [boolean, boolean];
  },
): string {
  const t = o.tile, mma = tileMma(t), p = o.prefix ?? "", e = mma.m * mma.n;
  const accs = `var<workgroup> ${p}emu_acc: array<f32, ${tileSubgroups(t) * t.mt * t.nt * e}>;`;
  const lanes = (body: string) =>
    `for (var e = lane; e < emu_dims.x; e += ${o.sgSize}u) {
    let r = e / ${mma.n}u; let c = e % ${mma.n}u; let at = slot * ${e}u + e;
    ${body}
  }`;
  const mmaFn = (arr: string) =>
    `fn ${
      emuName(p, "mma", arr)
    }(slot: u32, asub: u32, ao: u32, ast: u32, acm: bool, bsub: u32, bo: u32, bst: u32, bcm: bool, lane: u32) {
  ${
      lanes(`var s = ${p}emu_acc[at];
    for (var k = 0u; k < emu_dims.y; k++) {
      let av = f32(${arr}${o.flat[0] ? "" : "[asub]"}[ao + select(r * ast + k, k * ast + r, acm)]);
      let bv = f32(${o.right}${
        o.flat[1] ? "" : "[bsub]"
      }[bo + select(k * bst + c, c * bst + k, bcm)]);
      s = s + av * bv;
    }
    ${p}emu_acc[at] = s;`)
    }
}`;
  const fns = o.left.map(mmaFn);
  fns.push(`fn ${p}emu_zero(slot: u32, lane: u32) {\n  ${lanes(`${p}emu_acc[at] = 0.0;`)}\n}`);
  for (const buf of o.storeTargets) {
    fns.push(
      `fn ${emuName(p, "store", buf)}(slot: u32, off: u32, stride: u32, f: f32, lane: u32) {\n  ${
        lanes(`${buf}[off + r * stride + c] = f * ${p}emu_acc[at];`)
      }\n}`,
    );
  }
  for (const buf of o.loadSources ?? []) {
    fns.push(
      `fn ${emuName(p, "load", buf)}(slot: u32, off: u32, stride: u32, f: f32, lane: u32) {\n  ${
        lanes(`${p}emu_acc[at] = f * ${buf}[off + r * stride + c];`)
      }\n}`,
    );
  }
  // the loop bounds, read from workgroup memory so that the shader compiler does not unroll the
  // emulation's loops (lavapipe then compiles a kernel several times faster)
  const dims = `const EMU_DIMS = vec2<u32>(${e}u, ${mma.k}u);\nvar<workgroup> emu_dims: vec2<u32>;`;
  return `${accs}\n${dims}\n${fns.join("\n")}`;
}
