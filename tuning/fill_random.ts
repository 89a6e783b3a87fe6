/**
 * Random operands made on the GPU for the tuning tools: hashed uniform values (no host copy, so
 * the paper's 8192 × 2304 and 256000 × 2304 operands take no host memory or upload time).
 * @module
 */
import type { GpuContext } from "../gpu/context.ts";
import { Recorder } from "../gpu/recorder.ts";
import type { DeviceTensor } from "../gpu/tensor.ts";
import { compileKernel, signature } from "../gpu/signature.ts";

/** Fills a tensor on the GPU with hashed uniform values in [−scale, scale) (no host copy). */
export async function fillRandom(
  ctx: GpuContext,
  t: DeviceTensor,
  seed: number,
  scale: number,
): Promise<void> {
  const mode = t.dtype === "f32" ? 0 : t.dtype === "bf16" ? 1 : 2;
  const sig = signature({
    params: { words: "u32", base: "u32", seed: "u32", mode: "u32", scale: "f32" },
    bindings: { outp: { elem: "u32", access: "read_write" } },
    layout: { struct: "P", uniform: "p" },
  });
  const code = `${sig.wgsl}
fn hash(x0: u32) -> u32 {
  var x = x0 * 747796405u + 2891336453u;
  x = ((x >> ((x >> 28u) + 4u)) ^ x) * 277803737u;
  return (x >> 22u) ^ x;
}
fn val(i: u32) -> f32 {
  return (f32(hash(i ^ p.seed) >> 8u) / 16777216.0 * 2.0 - 1.0) * p.scale;
}
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let w = (wg.y * nwg.x + wg.x) * 256u + lid;
  if (w >= p.words) { return; }
  if (p.mode == 0u) { outp[w] = bitcast<u32>(val(p.base + w)); return; }
  let a = val(p.base + 2u * w);
  let b = val(p.base + 2u * w + 1u);
  if (p.mode == 1u) { outp[w] = (bitcast<u32>(a) >> 16u) | (bitcast<u32>(b) & 0xffff0000u); }
  else { outp[w] = pack2x16float(vec2<f32>(a, b)); }
}
`;
  const k = await compileKernel(ctx, sig, code, "fill");
  const rec = new Recorder(ctx);
  rec.pass("fill", (p) => {
    for (const s of t.shards) {
      const words = s.buffer.size / 4;
      const params = { words, base: s.rowStart * t.cols, seed, mode, scale };
      const groups = Math.ceil(words / 256);
      const x = Math.min(groups, 65535);
      p.dispatch(k.pipeline, k.bind(rec, params, { outp: s.buffer }), x, Math.ceil(groups / x));
    }
  });
  await rec.finish();
}
