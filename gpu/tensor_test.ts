import assert from "node:assert/strict";
import { GpuContext } from "./context.ts";
import {
  createTensor,
  download,
  elementBytes,
  fromHost,
  poison,
  rowsPerBinding,
  shardRows,
  type TensorDtype,
  upload,
} from "./tensor.ts";
import { GpuError } from "../core/errors.ts";
import { roundArray, roundTo } from "../core/dtype.ts";
import { GPU_TEST, randomArray, testContext } from "../testing/gpu.ts";

let small: Promise<GpuContext> | undefined;
/** A poisoned context with 4 KiB bindings. */
const smallContext = () => small ??= GpuContext.create({ poison: true, maxBindingBytes: 4096 });

Deno.test({
  name: "tensor: rows per binding; 16-bit tensors of odd width get an even count",
  ...GPU_TEST,
  async fn() {
    const ctx = await smallContext();
    assert.equal(ctx.maxBindingBytes, 4096);
    assert.equal(rowsPerBinding(ctx, "f32", 10), 102); // 4096 / 40
    assert.equal(rowsPerBinding(ctx, "i32", 1), 1024);
    assert.equal(rowsPerBinding(ctx, "bf16", 10), 204); // 4096 / 20
    assert.equal(rowsPerBinding(ctx, "bf16", 9), 226); // 227 rounded down to even
    assert.equal(rowsPerBinding(ctx, "f16", 1023), 2); // two rows of 2046 bytes
    assert.equal(rowsPerBinding(ctx, "f16", 1024), 2);
    assert.equal(rowsPerBinding(ctx, "f32", 1024), 1);
    const limits = (e: unknown, re: RegExp) => {
      assert.ok(e instanceof GpuError && e.kind === "limits", String(e));
      assert.match(e.message, re);
      return true;
    };
    assert.throws(
      () => rowsPerBinding(ctx, "f32", 1025),
      (e) =>
        limits(
          e,
          /^one row of 1025 f32 values \(4100 bytes\) exceeds the per-binding limit of 4096 bytes$/,
        ),
    );
    // An odd 16-bit row must fit twice (shards start at even elements).
    assert.throws(
      () => rowsPerBinding(ctx, "bf16", 1025),
      (e) => limits(e, /^one row of 1025 bf16 values \(2050 bytes\) exceeds .* 4096 bytes$/),
    );
    assert.deepEqual([elementBytes("bf16"), elementBytes("f16"), elementBytes("u32")], [2, 2, 4]);
  },
});

Deno.test({
  name: "tensor: shards of 2048 rows or more hold a multiple of 256 rows; tensors shard so",
  ...GPU_TEST,
  async fn() {
    const ctx = await GpuContext.create({ maxBindingBytes: 10000 });
    try {
      assert.equal(rowsPerBinding(ctx, "f32", 1), 2304); // 2500 fit
      assert.equal(rowsPerBinding(ctx, "bf16", 1), 4864); // 5000 fit
      assert.equal(rowsPerBinding(ctx, "bf16", 3), 1666); // under 2048: every row that fits, even
      assert.equal(rowsPerBinding(ctx, "f32", 4), 625); // under 2048: not aligned
      const t = createTensor(ctx, {
        dtype: "f32",
        rows: 5000,
        cols: 1,
        role: "workspace",
        label: "t",
      });
      assert.deepEqual(t.shards.map((s) => [s.rowStart, s.rows]), [[0, 2304], [2304, 2304], [
        4608,
        392,
      ]]);
      t.destroy();
    } finally {
      ctx.destroy();
    }
  },
});

Deno.test({
  name: "tensor: shard layout — rows per shard, starts, padded sizes, labels, shardOf",
  ...GPU_TEST,
  async fn() {
    const ctx = await smallContext();
    const before = ctx.memory().liveBytes;
    // 301 rows of 9 bf16 (18 bytes): 226 rows per 4 KiB shard → 226 + 75.
    const t = createTensor(ctx, { dtype: "bf16", rows: 301, cols: 9, role: "input", label: "E" });
    assert.deepEqual(t.shards.map((s) => [s.rowStart, s.rows]), [[0, 226], [226, 75]]);
    assert.deepEqual(t.shards.map((s) => s.buffer.size), [4080, 1360]); // 16-byte multiples
    assert.ok(t.shards.every((s) => s.buffer.size <= ctx.maxBindingBytes));
    assert.deepEqual(t.shards.map((s) => s.buffer.buffer.label), ["E[0]", "E[1]"]);
    assert.equal(t.bytes, 301 * 9 * 2);
    assert.equal(t.allocatedBytes, 4080 + 1360);
    assert.equal(ctx.memory().liveBytes - before, t.allocatedBytes);
    assert.equal(t.shardOf(0), t.shards[0]);
    assert.equal(t.shardOf(225), t.shards[0]);
    assert.equal(t.shardOf(226), t.shards[1]);
    assert.equal(t.shardOf(300), t.shards[1]);
    assert.throws(() => t.shardOf(301), RangeError);
    t.destroy();
    assert.equal(ctx.memory().liveBytes, before);
    // maxRowsPerShard: odd-width 16-bit tensors keep even starts (3 → 2 rows per shard).
    for (const dtype of ["bf16", "f16"] as const) {
      const u = createTensor(ctx, {
        dtype,
        rows: 7,
        cols: 3,
        role: "workspace",
        label: "u",
        maxRowsPerShard: 3,
      });
      assert.deepEqual(u.shards.map((s) => [s.rowStart, s.rows]), [[0, 2], [2, 2], [4, 2], [6, 1]]);
      for (const s of u.shards) assert.equal((s.rowStart * 3) % 2, 0, "even first element");
      u.destroy();
    }
    // Even width or 32-bit: any count.
    const w = createTensor(ctx, {
      dtype: "f32",
      rows: 7,
      cols: 3,
      role: "workspace",
      label: "w",
      maxRowsPerShard: 3,
    });
    assert.deepEqual(w.shards.map((s) => [s.rowStart, s.rows]), [[0, 3], [3, 3], [6, 1]]);
    assert.equal(w.shards[0].buffer.buffer.label, "w[0]");
    w.destroy();
    // One shard holding everything keeps the plain label.
    const one = createTensor(ctx, { dtype: "f32", rows: 3, cols: 3, role: "output", label: "one" });
    assert.equal(one.shards.length, 1);
    assert.equal(one.shards[0].buffer.buffer.label, "one");
    one.destroy();
  },
});

/** Values a dtype holds exactly after rounding (integers for i32/u32). */
function _values(dtype: TensorDtype, count: number, seed: number): Float32Array {
  const r = randomArray(count, seed, 3);
  if (dtype === "i32") return Float32Array.from(r, (x) => Math.round(x * 1e6));
  if (dtype === "u32") return Float32Array.from(r, (x) => Math.round((x + 3) * 1e6));
  return dtype === "f32" ? r : roundArray(r, dtype);
}

Deno.test({
  name: "tensor: upload/download round trips per dtype, sharded at odd widths",
  ...GPU_TEST,
  async fn() {
    const ctx = await smallContext();
    const dtypes: TensorDtype[] = [
      "f32",
      "bf16",
      "i32",
      "u32",
      ...(ctx.hasF16 ? ["f16" as const] : []),
    ];
    let seed = 1;
    for (const dtype of dtypes) {
      for (const [rows, cols] of [[1, 1], [7, 3], [301, 9], [5, 1023], [37, 64], [3, 1024]]) {
        if (elementBytes(dtype) === 4 && cols > 1024) continue;
        const vals = _values(dtype, rows * cols, seed++);
        const data = dtype === "i32"
          ? Int32Array.from(vals)
          : dtype === "u32"
          ? Uint32Array.from(vals)
          : vals;
        const t = fromHost(ctx, { dtype, rows, cols, role: "input", label: "t" }, data);
        assert.ok(
          t.shards.length > 1 || rows * cols * elementBytes(dtype) <= 4096,
          "big ones are sharded",
        );
        const got = await download(ctx, t);
        assert.deepEqual(got, vals, `${dtype} ${rows}×${cols}`);
        // Overwrite in place: the same layout on the second upload.
        const again = Float32Array.from(vals, (x) => dtype === "u32" ? x + 1 : -x);
        upload(ctx, t, dtype === "i32" ? Int32Array.from(again) : again);
        assert.deepEqual(await download(ctx, t), again, `${dtype} ${rows}×${cols} re-upload`);
        t.destroy();
      }
    }
    const t = createTensor(ctx, { dtype: "f32", rows: 2, cols: 3, role: "input", label: "T" });
    assert.throws(() => upload(ctx, t, new Float32Array(5)), /T: upload of 5 values into 2×3/);
    t.destroy();
  },
});

Deno.test({
  name: "tensor: bf16 and f16 uploads round to nearest even (ties, subnormals, overflow)",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cases: Record<"bf16" | "f16", [number, number][]> = {
      bf16: [
        [1 + 2 ** -8, 1], // tie → even
        [1 + 3 * 2 ** -8, 1 + 2 ** -6], // tie → even (up)
        [1 + 2 ** -8 + 2 ** -20, 1 + 2 ** -7], // above the tie
        [-2.5, -2.5],
        [3e38, (1 + 98 / 128) * 2 ** 127], // bits 0x7f62
        [3.4028234663852886e38, Infinity], // the largest f32 rounds up past bf16's range
        [1e-40, 2 ** -133], // an f32 subnormal keeps its top bits (0x0001)
        [Infinity, Infinity],
        [-0, -0],
      ],
      f16: [
        [1 + 2 ** -11, 1], // tie → even
        [1 + 3 * 2 ** -11, 1 + 2 ** -9],
        [65504, 65504], // largest f16
        [65519, 65504], // below the rounding edge
        [65520, Infinity], // overflow
        [2 ** -24, 2 ** -24], // smallest subnormal
        [2 ** -25, 0], // tie → even (0)
        [3 * 2 ** -26, 2 ** -24],
        [1e-8, 0],
        [-0, -0],
      ],
    };
    for (const dtype of ["bf16", "f16"] as const) {
      if (dtype === "f16" && !ctx.hasF16) continue;
      const input = Float32Array.from(cases[dtype], ([x]) => x);
      const want = Float32Array.from(cases[dtype], ([, y]) => y);
      // the host rounding agrees with the table
      for (let i = 0; i < input.length; i++) {
        const r = roundTo(input[i], dtype);
        assert.ok(
          Object.is(r, want[i]),
          `${dtype}(${input[i]}) = ${r} on the host, want ${want[i]}`,
        );
      }
      const t = fromHost(
        ctx,
        { dtype, rows: 1, cols: input.length, role: "input", label: dtype },
        input,
      );
      const got = await download(ctx, t);
      for (let i = 0; i < got.length; i++) {
        assert.ok(Object.is(got[i], want[i]), `${dtype}(${input[i]}) = ${got[i]}, want ${want[i]}`);
      }
      // NaN stays NaN.
      const nan = fromHost(
        ctx,
        { dtype, rows: 1, cols: 1, role: "input", label: "nan" },
        new Float32Array([NaN]),
      );
      assert.ok(Number.isNaN((await download(ctx, nan))[0]));
      t.destroy();
      nan.destroy();
    }
  },
});

Deno.test({
  name: "tensor: poison() marks every element of every shard",
  ...GPU_TEST,
  async fn() {
    const ctx = await smallContext();
    for (const dtype of ["f32", "bf16", "i32"] as const) {
      const t = fromHost(
        ctx,
        { dtype, rows: 301, cols: 9, role: "workspace", label: "p" },
        new Float32Array(301 * 9).fill(1),
      );
      assert.ok(t.shards.length > 1);
      poison(ctx, t);
      const got = await download(ctx, t);
      assert.ok(got.every((x) => dtype === "i32" ? x === -1 : Number.isNaN(x)), dtype);
      t.destroy();
    }
  },
});

Deno.test({
  name: "tensor: a refused shard frees the shards already made",
  ...GPU_TEST,
  async fn() {
    const ctx = await smallContext();
    const before = ctx.memory().liveBytes;
    assert.throws(
      () => createTensor(ctx, { dtype: "f32", rows: 4, cols: 2000, role: "input", label: "wide" }),
      (e) => e instanceof GpuError && e.kind === "limits",
    );
    assert.equal(ctx.memory().liveBytes, before);
  },
});

Deno.test({
  name: "shardRows: the rows of each shard, as createTensor makes them",
  ...GPU_TEST,
  async fn() {
    assert.deepEqual(shardRows(10, 4), [4, 4, 2]);
    assert.deepEqual(shardRows(8, 4), [4, 4]);
    assert.deepEqual(shardRows(0, 4), []);
    const ctx = await GpuContext.create({ maxBindingBytes: 4096 });
    try {
      const t = createTensor(ctx, { dtype: "f32", rows: 70, cols: 33, role: "input", label: "t" });
      const per = rowsPerBinding(ctx, "f32", 33);
      assert.deepEqual(t.shards.map((s) => s.rows), shardRows(70, per));
      assert.ok(t.shards.length > 1, "sharded");
      t.destroy();
    } finally {
      ctx.destroy();
    }
  },
});
