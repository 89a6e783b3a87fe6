import assert from "node:assert/strict";
import { createTensor, download, fromHost, upload } from "./tensor.ts";
import { type PassEncoder, Recorder } from "./recorder.ts";
import { GATE_CAPACITY, prepareGate, recordGatedPasses } from "./gate.ts";
import { compileKernel, signature } from "./signature.ts";
import { GPU_TEST, testContext } from "../testing/gpu.ts";

const SIG = signature({
  params: { add: "u32" },
  bindings: { x: { elem: "u32", access: "read_write" } },
});
// each workgroup adds `add` to the word of its id
const WGSL = `${SIG.wgsl}
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) wg: vec3<u32>) { x[wg.x] = x[wg.x] + P.add; }
`;

Deno.test({
  name: "gate: a gated pass does its work only where the flag equals want, direct and indirect",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const gate = await prepareGate(ctx);
    const k = await compileKernel(ctx, SIG, WGSL, "gate test add");
    const x = createTensor(ctx, { dtype: "u32", rows: 8, cols: 1, role: "output", label: "x" });
    const flag = createTensor(ctx, { dtype: "u32", rows: 1, cols: 1, role: "input", label: "f" });
    // indirect counts: 5 workgroups at word 4 (words 0…3 hold something else)
    const counts = createTensor(ctx, {
      dtype: "u32",
      rows: 8,
      cols: 1,
      role: "input",
      label: "counts",
      usage: GPUBufferUsage.INDIRECT,
    });
    upload(ctx, counts, Uint32Array.of(9, 9, 9, 9, 5, 1, 1, 0));
    for (const f of [0, 1, 7]) {
      upload(ctx, x, new Uint32Array(8));
      upload(ctx, flag, Uint32Array.of(f));
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const xb = x.shards[0].buffer;
        for (const want of [0, 1]) {
          gate.under(rec, { flag: flag.shards[0].buffer, want }, () => {
            rec.pass("gated", (p) => {
              // 3 workgroups adding 1 (want 0) or 10 (want 1), then 5 more from `counts`
              p.dispatch(k.pipeline, k.bind(rec, { add: want ? 10 : 1 }, { x: xb }), 3);
              p.dispatchIndirect(
                k.pipeline,
                k.bind(rec, { add: want ? 100 : 1000 }, { x: xb }),
                counts.shards[0].buffer,
                16,
              );
            });
          });
        }
        // an ungated pass after the gates runs as usual
        rec.pass("plain", (p) => p.dispatch(k.pipeline, k.bind(rec, { add: 5 }, { x: xb }), 8));
        await rec.finish();
      });
      const got = Array.from(await download(ctx, x));
      const want = [0, 1, 2, 3, 4, 5, 6, 7].map((i) =>
        5 + (f === 0 ? (i < 3 ? 1 : 0) + (i < 5 ? 1000 : 0) : 0) +
        (f === 1 ? (i < 3 ? 10 : 0) + (i < 5 ? 100 : 0) : 0)
      );
      assert.deepEqual(got, want, `flag ${f}`);
    }
    for (const t of [x, flag, counts]) t.destroy();
  },
});

Deno.test({
  name: "gate: gates nest, a dispatch doing its work only where both flags are their wants",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const gate = await prepareGate(ctx);
    const k = await compileKernel(ctx, SIG, WGSL, "gate test add");
    const x = createTensor(ctx, { dtype: "u32", rows: 4, cols: 1, role: "output", label: "x" });
    const mk = (label: string) =>
      createTensor(ctx, { dtype: "u32", rows: 1, cols: 1, role: "input", label });
    const outer = mk("outer"), inner = mk("inner");
    const counts = createTensor(ctx, {
      dtype: "u32",
      rows: 4,
      cols: 1,
      role: "input",
      label: "counts",
      usage: GPUBufferUsage.INDIRECT,
    });
    upload(ctx, counts, Uint32Array.of(3, 1, 1, 0));
    for (const [fo, fi] of [[0, 0], [0, 1], [1, 0], [1, 1]]) {
      upload(ctx, x, new Uint32Array(4));
      upload(ctx, outer, Uint32Array.of(fo));
      upload(ctx, inner, Uint32Array.of(fi));
      await ctx.scoped(async () => {
        const rec = new Recorder(ctx);
        const xb = x.shards[0].buffer;
        gate.under(rec, { flag: outer.shards[0].buffer, want: 1 }, () => {
          // under the outer gate alone: 4 workgroups adding 1
          rec.pass("outer", (p) => p.dispatch(k.pipeline, k.bind(rec, { add: 1 }, { x: xb }), 4));
          gate.under(rec, { flag: inner.shards[0].buffer, want: 0 }, () => {
            rec.pass("both", (p) => {
              // 2 workgroups adding 10, then 3 from `counts` adding 100
              p.dispatch(k.pipeline, k.bind(rec, { add: 10 }, { x: xb }), 2);
              p.dispatchIndirect(
                k.pipeline,
                k.bind(rec, { add: 100 }, { x: xb }),
                counts.shards[0].buffer,
                0,
              );
            });
          });
        });
        await rec.finish();
      });
      const got = Array.from(await download(ctx, x));
      const want = [0, 1, 2, 3].map((i) =>
        fo === 1 ? 1 + (fi === 0 ? (i < 2 ? 10 : 0) + (i < 3 ? 100 : 0) : 0) : 0
      );
      assert.deepEqual(got, want, `outer ${fo}, inner ${fi}`);
    }
    for (const t of [x, outer, inner, counts]) t.destroy();
  },
});

Deno.test({
  name: "gate: a pass of too many dispatches is refused, under nested gates one fewer",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const gate = await prepareGate(ctx);
    const k = await compileKernel(ctx, SIG, WGSL, "gate test add");
    const x = fromHost(
      ctx,
      { dtype: "u32", rows: 1, cols: 1, role: "output", label: "x" },
      new Uint32Array(1),
    );
    const xb = x.shards[0].buffer;
    const many = (rec: Recorder, n: number) =>
      rec.pass("many", (p) => {
        for (let i = 0; i < n; i++) p.dispatch(k.pipeline, k.bind(rec, { add: 1 }, { x: xb }), 1);
      });
    await ctx.scoped(async () => {
      const rec = new Recorder(ctx);
      assert.throws(() => gate.under(rec, { flag: xb, want: 1 }, () => many(rec, 65)), /over 64/);
      const nested = (n: number) =>
        gate.under(
          rec,
          { flag: xb, want: 1 },
          () => gate.under(rec, { flag: xb, want: 0 }, () => many(rec, n)),
        );
      nested(63);
      assert.throws(() => nested(64), /over 64 dispatches/);
      await rec.finish();
    });
    x.destroy();
  },
});

Deno.test("gate: items in as few passes as the gate's capacity holds, in order", () => {
  const passes: { label: string; items: number[] }[] = [];
  const rec = {
    pass(label: string, fn: (p: PassEncoder) => void) {
      passes.push({ label, items: [] });
      fn({} as PassEncoder);
    },
  } as unknown as Recorder;
  // 3 dispatches an item: 21 items a pass
  const items = Array.from({ length: 50 }, (_, i) => i);
  recordGatedPasses(rec, "work", items, () => 3, (x) => passes.at(-1)!.items.push(x));
  assert.deepEqual(passes.map((p) => p.items.length), [21, 21, 8]);
  assert.deepEqual(passes.flatMap((p) => p.items), items);
  assert.ok(passes.every((p) => p.label === "work"));
  // uneven items fill a pass up to the capacity exactly
  passes.length = 0;
  recordGatedPasses(rec, "w", [2, 3, 2, 3], (x) => x === 3 ? GATE_CAPACITY - 2 : 2, () => {});
  assert.equal(passes.length, 2);
  assert.throws(() => recordGatedPasses(rec, "w", [1], () => GATE_CAPACITY + 1, () => {}), /over/);
});
