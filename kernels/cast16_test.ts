import assert from "node:assert/strict";
import { GpuContext } from "../gpu/context.ts";
import { createTensor, download, fromHost } from "../gpu/tensor.ts";
import { Recorder } from "../gpu/recorder.ts";
import { roundArray } from "../core/dtype.ts";
import { type Dtype16, prepareCast16 } from "./cast16.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

/** Values that exercise rounding: ties, carries into the exponent, f16 subnormals and overflow. */
function _values(count: number): Float32Array {
  const special = [
    0,
    -0,
    1,
    1 + 2 ** -8, // bf16 tie, rounds to even (down)
    1 + 3 * 2 ** -8, // bf16 tie, rounds up
    1 + 2 ** -11, // f16 tie
    1 + 3 * 2 ** -11,
    2 - 2 ** -12, // carries into the exponent
    65504,
    65519,
    65520, // f16 tie at the top: overflows to Inf
    1e-5, // f16 subnormal
    -3e-7,
    6e-8,
    2e-8, // below half the smallest f16 subnormal: ±0
    1e30,
    -1e-30,
    3.3e38,
  ];
  const out = randomArray(count, 5, 4);
  for (let i = 0; i < count; i++) {
    if (i < special.length) out[i] = special[i];
    else if (i % 3 === 0) out[i] *= 1e-4;
  }
  return out;
}

async function _cast(
  ctx: GpuContext,
  dtype: Dtype16,
  rows: number,
  cols: number,
  shard?: number,
  srcShard = shard,
) {
  const host = _values(rows * cols);
  const src = fromHost(
    ctx,
    { dtype: "f32", rows, cols, role: "input", label: "src", maxRowsPerShard: srcShard },
    host,
  );
  const dst = createTensor(ctx, {
    dtype,
    rows,
    cols,
    role: "output",
    label: "dst",
    maxRowsPerShard: shard,
  });
  const cast = await prepareCast16(ctx, dtype);
  await ctx.scoped(async () => {
    const rec = new Recorder(ctx);
    cast.record(rec, { src, dst });
    await rec.finish();
  });
  const got = await download(ctx, dst);
  const want = roundArray(host, dtype);
  for (let i = 0; i < want.length; i++) {
    assert.ok(
      Object.is(got[i], want[i]),
      `${dtype} ${rows}×${cols}: element ${i} (${host[i]}) cast to ${got[i]}, want ${want[i]}`,
    );
  }
  src.destroy();
  dst.destroy();
}

Deno.test({
  name: "cast16: f32 → bf16/f16 rounds to nearest even like the host, odd widths, shards",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    for (const dtype of ["bf16", "f16"] as const) {
      await _cast(ctx, dtype, 7, 9); // odd element count: the last word has one element
      await _cast(ctx, dtype, 12, 33, 4); // shards of an odd width start on even elements
      await _cast(ctx, dtype, 1, 1);
      // source and destination sharded differently (pieces inside one shard of each)
      await _cast(ctx, dtype, 13, 33, 6, 4);
      await _cast(ctx, dtype, 13, 34, 4, 3);
      await _cast(ctx, dtype, 9, 8, undefined, 2);
    }
    // a piece starting inside a word is refused
    await assert.rejects(() => _cast(ctx, "bf16", 6, 33, 4, 3), /inside a word/);
  },
});
