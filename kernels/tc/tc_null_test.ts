/**
 * Every native tensor-core kernel (kernels/tc/tc_catalog.ts, generated for NVIDIA's 32-wide
 * subgroups) compiled and validated by Dawn's null backend: WGSL parsing, types, the
 * subgroup-matrix builtins' signatures and Dawn's uniformity analysis of their offsets, then
 * pipeline creation. The null device has WebGPU's default limits (16 KiB of workgroup memory,
 * 256 invocations), below what the kernels are generated for (48 KiB on NVIDIA), so a catalog
 * kernel may fail pipeline creation on those limits only; each kernel family is also generated at
 * a tile within them and must then create its pipeline outright.
 */
import assert from "node:assert/strict";
import { nullDevice, validateShader } from "../../testing/dawn_null.ts";
import { resolveOptions } from "../../core/options.ts";
import { signature } from "../../gpu/signature.ts";
import { filterPassSignature } from "../fused/filter.ts";
import { type CatalogKernel, compileKernels, tcCatalog } from "./tc_catalog.ts";
import { type TcMatmulKernelOptions, tcMatmulSignature, tcMatmulWgsl } from "./tc_matmul_wgsl.ts";
import { tcForwardSignature, tcForwardWgsl } from "./tc_forward_wgsl.ts";
import { type TcFilterKernelOptions, tcFilterWgsl } from "./tc_filter_wgsl.ts";
import { ABSMAX_SIGNATURE, absmaxWgsl, SCALES_SIGNATURE, scalesWgsl } from "./tc_scale.ts";
import { tcMinBindingBytes } from "./tc_bindings.ts";
import { probeCases, probeConversionWgsl, probeWgsl } from "./tc_probe.ts";
import type { TcTile } from "./tc_tiles.ts";

const nd = await nullDevice();
if (nd.skip) console.log(`tc null-backend tests skipped: ${nd.skip}`);
/** Ignored (with the message above) only where npm:webgpu cannot be loaded at all. */
const NULL_OPTS = { sanitizeResources: false, sanitizeOps: false, ignore: !nd.device } as const;

Deno.test({
  name: "tc kernels: the whole catalog validates on Dawn's null backend",
  ...NULL_OPTS,
  async fn() {
    const device = nd.device!;
    const kernels = tcCatalog(32);
    assert.ok(kernels.length >= 60, `catalog of ${kernels.length} kernels`);
    const bad: string[] = [];
    let created = 0;
    for (const k of kernels) {
      const v = await validateShader(device, k.code);
      if (v.errors.length > 0) bad.push(`${k.name}: ${v.errors[0]}`);
      else if (v.pipelineError && !v.limitOnly) bad.push(`${k.name}: ${v.pipelineError}`);
      else if (!v.pipelineError) created++;
    }
    assert.deepEqual(bad, [], bad.join("\n"));
    console.log(`${kernels.length} kernels valid, ${created} within the null device's limits`);
  },
});

/** A 32×32 tile of 4 subgroups of one matrix: within the null device's limits. */
const SMALL: TcTile = { sgRows: 2, sgCols: 2, mt: 1, nt: 1, bk: 16 };

/** Every kernel family at {@link SMALL}: within the null device's limits. */
function smallFamilies(): CatalogKernel[] {
  const out: CatalogKernel[] = [];
  for (const dbuf of [false, true]) {
    for (
      const [aTrans, bTrans, split] of [[false, false, false], [false, true, true], [
        true,
        true,
        true,
      ]]
    ) {
      for (const straight of [true, false]) {
        const ko: TcMatmulKernelOptions = {
          tile: { ...SMALL, dbuf },
          sgSize: 32,
          a: { dtype: split ? "f32" : "bf16", contig: aTrans ? "mn" : "k", vec: dbuf, split },
          b: { dtype: "bf16", contig: bTrans ? "mn" : "k", vec: !dbuf },
          scaleA: true,
          scaleB: true,
          straight,
        };
        out.push({
          name: `matmul ${aTrans}${bTrans}${split}${dbuf}${straight}`,
          code: tcMatmulWgsl(ko),
          sig: tcMatmulSignature(ko),
          matrices: straight ? ["outp", "part"] : [],
        });
      }
    }
  }
  for (const tileMax of [false, true]) {
    const fo = {
      tile: SMALL,
      sgSize: 32,
      dtype: "bf16" as const,
      softcap: tileMax ? 30 : undefined,
      sumZ: tileMax,
      vecLoads: tileMax,
      tileMax,
    };
    out.push({
      name: `forward ${tileMax}`,
      code: tcForwardWgsl(fo),
      sig: tcForwardSignature(fo),
      matrices: [],
    });
  }
  for (const [sort, entryBits] of [[false, true], [true, false]]) {
    const fo: TcFilterKernelOptions = {
      tile: { tokens: 32, vocab: 16, bk: 8, tokensPerThread: 4, vocabPerThread: 4 },
      filterTile: { bm: 32, bn: 32, bk: 16, tm: 4, tn: 4, vec: true },
      dtype: "f16",
      opts: resolveOptions({ beta: 0.1, softcap: 10 }),
      v: 1000,
      eps: 2 ** -15,
      sort,
      entryBits,
      vecLoads: sort,
      scales: true,
      tcTile: SMALL,
      sgSize: 32,
    };
    out.push({
      name: `filter ${sort} ${entryBits}`,
      code: tcFilterWgsl(fo),
      sig: filterPassSignature(fo),
      matrices: [],
    });
  }
  out.push({ name: "absmax", code: absmaxWgsl("bf16"), sig: ABSMAX_SIGNATURE, matrices: [] });
  out.push({ name: "scales", code: scalesWgsl(), sig: SCALES_SIGNATURE, matrices: [] });
  return out;
}

Deno.test({
  name: "tc kernels: each family creates its pipeline on the null device at a small tile",
  ...NULL_OPTS,
  async fn() {
    const device = nd.device!;
    for (const k of smallFamilies()) {
      k.sig.check(k.code, k.name);
      const v = await validateShader(device, k.code);
      assert.deepEqual(v.errors, [], k.name);
      assert.equal(v.pipelineError, undefined, k.name);
    }
  },
});

Deno.test({
  name: "tc kernels: Dawn's minimum binding sizes are tcMinBindingBytes's, binding by binding",
  ...NULL_OPTS,
  async fn() {
    const device = nd.device!;
    const buf = (size: number, usage: number = GPUBufferUsage.STORAGE) =>
      device.createBuffer({ size, usage });
    const uniform = buf(256, GPUBufferUsage.UNIFORM);
    let checked = 0, refused = 0;
    for (const k of smallFamilies()) {
      const module = device.createShaderModule({ code: k.code });
      const pl = device.createComputePipeline({
        layout: "auto",
        compute: { module, entryPoint: "main" },
      });
      const min = tcMinBindingBytes(k.sig, k.matrices);
      const group = (name: string, size: number) => {
        const entries = k.sig.bindings.map((b) => ({
          binding: b.index,
          resource: {
            buffer: b.access === "uniform" ? uniform : buf(b.name === name ? size : 1 << 16),
          },
        }));
        device.pushErrorScope("validation");
        device.createBindGroup({ layout: pl.getBindGroupLayout(0), entries });
        return device.popErrorScope();
      };
      for (const [name, bytes] of Object.entries(min)) {
        const ok = await group(name, bytes);
        assert.equal(ok, null, `${k.name}: '${name}' at ${bytes} bytes: ${ok?.message}`);
        checked++;
        if (bytes >= 8) {
          const e = await group(name, bytes - 4);
          assert.match(e?.message ?? "", /minimum binding size/, `${k.name}: '${name}' below`);
          refused++;
        }
      }
    }
    assert.ok(refused >= 8, `${refused} of ${checked} bindings refused below their minimum`);
  },
});

Deno.test({
  name: "tc kernels: the GPU commands' parallel compilation reports each kernel's own error",
  ...NULL_OPTS,
  async fn() {
    const good = tcCatalog(32).slice(0, 6);
    const bad = {
      name: "broken",
      code: "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }",
      sig: signature({ bindings: {} }),
      matrices: [],
    };
    const got = await compileKernels(nd.device!, [...good, bad, ...good], 4);
    assert.deepEqual(got.map((k) => k.name), [...good, bad, ...good].map((k) => k.name));
    for (const k of got.filter((k) => k.name !== "broken")) {
      assert.ok(
        !k.error || /workgroup storage|workgroup_size/.test(k.error),
        `${k.name}: ${k.error}`,
      );
    }
    assert.match(got.find((k) => k.name === "broken")!.error ?? "", /^line 1:/);
  },
});

Deno.test({
  name: "tc kernels: the semantics probe's kernels validate on Dawn's null backend",
  ...NULL_OPTS,
  async fn() {
    const device = nd.device!;
    const codes: [string, string][] = [["conversions", probeConversionWgsl(420)]];
    for (const mma of [{ m: 16, n: 16, k: 16 }, { m: 16, n: 8, k: 16 }, { m: 16, n: 8, k: 8 }]) {
      // 128: the null device's subgroup size, to which the workgroup's x size must be a multiple
      for (const p of probeCases(mma)) codes.push([p.name, probeWgsl(p, 128)]);
    }
    assert.ok(codes.length > 40);
    for (const [name, code] of codes) {
      const v = await validateShader(device, code);
      assert.deepEqual(v.errors, [], name);
      assert.ok(!v.pipelineError || v.limitOnly, `${name}: ${v.pipelineError}`);
    }
  },
});
