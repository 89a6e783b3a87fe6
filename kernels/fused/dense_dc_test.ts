import assert from "node:assert/strict";
import { GPU_TEST, testContext } from "../../testing/gpu.ts";
import { caseInputs } from "../../testing/parity.ts";
import {
  assertDenseDecision,
  assertDensePath,
  type GradCase,
  gradCaseOptions,
  runBackward,
} from "../../testing/fused_backward.ts";
import {
  DENSE_DC_ABOVE,
  DENSE_DC_TAIL_BYTES,
  denseDCPlan,
  FUSED_BACKWARD_WORKSPACE_LIMIT,
} from "./dense_dc.ts";

Deno.test("dense dC plan: chunks from the top down, each G below its rows, the tail in bounds", () => {
  const shapes = [
    { n: 4096, v: 24576, d: 2304, outBytes: 2, restBytes: 360_000 },
    { n: 70, v: 1031, d: 33, outBytes: 4, restBytes: 5_000, maxTailRows: 200 },
    { n: 70, v: 1031, d: 40, outBytes: 2, restBytes: 5_000, maxTailRows: 80 },
    { n: 1000, v: 50257, d: 768, outBytes: 4, restBytes: 0 },
    { n: 4096, v: 128256, d: 4096, outBytes: 2, restBytes: 900_000 },
  ];
  for (const s of shapes) {
    const tag = JSON.stringify(s);
    const plan = denseDCPlan({ ...s, maxBindingBytes: 2 ** 31 - 4 });
    assert.ok(plan, `${tag}: a plan`);
    const { chunks, tailRows, tailBytes } = plan;
    assert.equal(chunks[0][1], s.v, `${tag}: starts at the top`);
    assert.equal(chunks.at(-1)![0], 0, `${tag}: ends at row 0`);
    assert.ok(chunks.at(-1)![1] <= tailRows, `${tag}: the last chunk in the tail`);
    // G in dC's element type
    const gRow = s.n * s.outBytes;
    assert.equal(tailBytes, Math.ceil((gRow * Math.min(tailRows, s.v)) / 16) * 16);
    assert.ok(tailBytes <= DENSE_DC_TAIL_BYTES, `${tag}: the tail's cap`);
    assert.ok(s.restBytes + tailBytes <= FUSED_BACKWARD_WORKSPACE_LIMIT, `${tag}: the limit`);
    for (let i = 0; i < chunks.length; i++) {
      const [v0, v1] = chunks[i];
      assert.ok(v0 < v1, `${tag}: chunk ${i} not empty`);
      if (i > 0) assert.equal(v1, chunks[i - 1][0], `${tag}: chunk ${i} adjoins the one above`);
      assert.equal((v0 * s.d * s.outBytes) % 256, 0, `${tag}: chunk ${i} on a binding offset`);
      if (i > 0) assert.equal((v1 - v0) % 16, 0, `${tag}: chunk ${i} whole 16-row groups`);
      if (i < chunks.length - 1) {
        const g = Math.ceil((gRow * (v1 - v0)) / 16) * 16;
        assert.ok(g <= v0 * s.d * s.outBytes, `${tag}: chunk ${i}'s G below its rows`);
      }
    }
  }
  // a granule of 64 rows (rows of 132 bytes) cannot step below 192 rows: a tail of 64 is refused
  const odd = { n: 70, v: 1031, d: 33, outBytes: 4, restBytes: 0, maxBindingBytes: 2 ** 31 - 4 };
  assert.equal(denseDCPlan({ ...odd, maxTailRows: 64 }), undefined);
  // the paper's shape: 35 chunks even down to the whole tail (96 rows), more to what its
  // workspace leaves: no plan
  const paper = { n: 8192, v: 256000, d: 2304, outBytes: 2, maxBindingBytes: 2 ** 31 - 4 };
  assert.equal(denseDCPlan({ ...paper, restBytes: 1_650_000 }), undefined);
  assert.equal(denseDCPlan({ ...paper, restBytes: 0 }), undefined);
  // no room for the tail: no plan
  const full = { n: 8192, v: 256000, d: 2304, outBytes: 2, maxBindingBytes: 2 ** 31 - 4 };
  assert.equal(
    denseDCPlan({ ...full, restBytes: FUSED_BACKWARD_WORKSPACE_LIMIT - 100_000 }),
    undefined,
  );
});

Deno.test({
  name: "dense dC: both dC paths forced, against float64, at odd shapes",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    // |V| odd; small tails force several chunks (the least a tail can be: denseDCPlan's test)
    const tail = (rows: number, smallBelow?: number) => ({
      denseDCTailRows: rows,
      denseDCTuning: smallBelow === undefined ? undefined : { smallBelow },
    });
    await assertDensePath(ctx, {
      path: "denseDC",
      cases: [
        { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: true, extra: tail(80) },
        // chunks of 100 rows or more on the large tiles, the rest on the small ones
        {
          dtype: "bf16",
          beta: 0.1,
          d: 40,
          gradDtype: "input",
          sort: false,
          extra: tail(80, 100),
        },
        {
          dtype: "bf16",
          beta: 1,
          softcap: 4,
          d: 34,
          gradDtype: "input",
          sort: false,
          extra: tail(320),
        },
        {
          dtype: "f32",
          beta: 0.1,
          softcap: 5,
          d: 33,
          gradDtype: "f32",
          sort: true,
          extra: tail(200),
        },
        // d odd with 16-bit gradients: dC accumulated in its f32 scratch, then cast
        { dtype: "bf16", beta: 0, d: 33, gradDtype: "input", sort: false, extra: tail(256) },
        // one chunk: the tail holds every row
        { dtype: "bf16", beta: 0.1, d: 8, gradDtype: "f32", sort: false, v: 1500 },
      ],
      seed: 120,
      // the kept path's roundings in place
      keptRoundings: (kept) => kept.bwd.roundings.dC,
      check({ cs, tag, dense }) {
        // its roundings of a dC element: G's and the output's in place, the cast's with d odd
        const inPlace = cs.gradDtype === "input" && cs.d % 2 === 0;
        const r = cs.gradDtype === "f32" ? 0 : inPlace ? 2 : 1;
        assert.equal(dense.bwd.roundings.dC, r, `${tag}: dC roundings`);
        const chunks = dense.bwd.lastDenseDCChunks;
        const several = cs.extra?.denseDCTailRows !== undefined;
        assert.ok(several ? chunks > 3 : chunks === 1, `${tag}: ${chunks} chunks`);
      },
    });
  },
});

Deno.test({
  name: "dense dC: not recorded where E and C span several bindings; the kept tiles' dC instead",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    const cs: GradCase = { dtype: "bf16", beta: 0.1, d: 40, gradDtype: "input", sort: false };
    const { o, b } = gradCaseOptions(cs);
    const x = caseInputs({ n: 70, v: 1031, d: 40, dtype: "bf16", beta: 0.1, seed: 131 });
    const sharded = await runBackward(ctx, x, o, "bf16", {
      ...b,
      denseDC: "always",
      shardRows: 300,
    });
    const kept = await runBackward(ctx, x, o, "bf16", { ...b, denseDC: "never", shardRows: 300 });
    assert.equal(sharded.bwd.lastDenseDCChunks, 0);
    assert.equal(sharded.got.stats.denseDC, undefined);
    assert.deepEqual(sharded.got.dC, kept.got.dC);
  },
});

Deno.test({
  name:
    "dense dC: the decision takes the dense path where most tiles are kept, else the kept tiles",
  ...GPU_TEST,
  async fn() {
    const ctx = await testContext();
    await assertDenseDecision(ctx, {
      path: "denseDC",
      above: DENSE_DC_ABOVE,
      seeds: [7, 8],
      extra: { denseDCTailRows: 64 },
    });
  },
});
