/**
 * Every workgroup variable of every native tensor-core kernel is a whole number of 16 bytes, so
 * each starts 16-byte aligned wherever the driver places it, as subgroup-matrix loads and stores
 * into workgroup memory need (kernels/tc/tc_codegen.ts, wgWords).
 */
import assert from "node:assert/strict";
import { tcCatalog } from "./tc_catalog.ts";

const SCALAR_BYTES: Record<string, number> = { f16: 2, f32: 4, u32: 4, i32: 4 };

/** Bytes of a WGSL workgroup type: scalars, atomics, vectors and fixed arrays of them. */
function wgslBytes(type: string): number {
  const t = type.replace(/\s+/g, "");
  const arr = t.match(/^array<(.+),(\d+)u?>$/);
  if (arr) return wgslBytes(arr[1]) * Number(arr[2]);
  const at = t.match(/^atomic<(u32|i32)>$/);
  if (at) return 4;
  const vec = t.match(/^vec([234])<(f16|f32|u32|i32)>$/);
  if (vec) return Number(vec[1]) * SCALAR_BYTES[vec[2]];
  if (t in SCALAR_BYTES) return SCALAR_BYTES[t];
  throw new RangeError(`unknown workgroup type ${type}`);
}

Deno.test("wgslBytes: the sizes the check below relies on", () => {
  assert.equal(wgslBytes("array<f16, 40>"), 80);
  assert.equal(wgslBytes("array<atomic<u32>, 4>"), 16);
  assert.equal(wgslBytes("atomic<u32>"), 4);
  assert.equal(wgslBytes("vec2<u32>"), 8);
  assert.throws(() => wgslBytes("mat4x4<f32>"));
});

Deno.test("tc kernels: every workgroup variable of a subgroup-matrix kernel is a multiple of 16 bytes", () => {
  const kernels = tcCatalog(32).filter((k) => k.code.includes("subgroup_matrix_"));
  assert.ok(kernels.length >= 50, `${kernels.length} kernels`);
  const bad: string[] = [];
  let vars = 0;
  for (const k of kernels) {
    const decls = [...k.code.matchAll(/var<workgroup>\s+(\w+)\s*:\s*([^;]+);/g)];
    assert.ok(decls.length > 0, `${k.name}: no workgroup variable found`);
    for (const [, name, type] of decls) {
      vars++;
      const bytes = wgslBytes(type);
      if (bytes % 16 !== 0) bad.push(`${k.name}: ${name}: ${type} is ${bytes} bytes`);
    }
  }
  assert.deepEqual(bad, []);
  assert.ok(vars > kernels.length, `${vars} variables`);
});
