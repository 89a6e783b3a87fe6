import assert from "node:assert/strict";
import { InputError } from "../core/errors.ts";
import { assertClose, compareArrays, describeWorst } from "./compare.ts";

const TOL = { atol: 1e-6, rtol: 1e-3 };

Deno.test("compareArrays: within tolerance", () => {
  const r = compareArrays([1, 2, 0], [1.0005, 2, 1e-7], TOL);
  assert.equal(r.ok, true);
  assert.equal(r.failures, 0);
  assert.ok(Math.abs(r.maxAbsErr - 5e-4) < 1e-12);
  assert.ok(Math.abs(r.maxRelErr - 1) < 1e-9); // |0 − 1e-7| / 1e-7
  assert.equal(r.worstIndex, 0); // 5e-4 of an allowance 1e-6 + 1.0005e-3
});

Deno.test("compareArrays: the worst index is the element furthest out of tolerance", () => {
  // Element 0 has the larger absolute error but a larger allowance.
  const r = compareArrays([1000.5, 0.01], [1000, 0], TOL);
  assert.equal(r.ok, false);
  assert.equal(r.failures, 1);
  assert.equal(r.worstIndex, 1);
  assert.equal(r.maxAbsErr, 0.5);
  assert.ok(Math.abs(r.maxRelErr - 5e-4) < 1e-12); // want = 0 is left out of the relative error
});

Deno.test("compareArrays: NaN and Inf", () => {
  const nanGot = compareArrays([1, NaN, 3], [1, 2, 3], TOL);
  assert.equal(nanGot.ok, false);
  assert.equal(nanGot.worstIndex, 1);
  assert.equal(nanGot.maxAbsErr, Infinity);
  assert.equal(compareArrays([Infinity], [1e300], TOL).ok, false);
  assert.equal(compareArrays([1], [NaN], TOL).ok, false);
  assert.equal(compareArrays([NaN, -Infinity], [NaN, -Infinity], TOL).ok, true);
  assert.equal(compareArrays([Infinity], [-Infinity], TOL).ok, false);
});

Deno.test("compareArrays: empty arrays, length mismatch, bad tolerance", () => {
  const r = compareArrays([], [], TOL);
  assert.equal(r.ok, true);
  assert.equal(r.worstIndex, -1);
  assert.throws(() => compareArrays([1], [1, 2], TOL), InputError);
  assert.throws(() => compareArrays([1], [1], { atol: -1, rtol: 0 }), InputError);
});

Deno.test("describeWorst names the element, its row and column, and the totals", () => {
  const got = new Float32Array([0, 0, 0, 0, 0, 0.25]);
  const want = [0, 0, 0, 0, 0, 0.5];
  const r = compareArrays(got, want, TOL);
  const line = describeWorst(got, want, r, { name: "dC", cols: 3 });
  assert.equal(
    line,
    "dC[5] (row 1, col 2): got 0.2500000, want 0.5000000, abs err 2.50e-1, rel err 5.00e-1 " +
      "(atol 1.00e-6, rtol 1.00e-3); 1 of 6 out of tolerance; max abs err 2.50e-1, " +
      "max rel err 5.00e-1",
  );
  assert.ok(!line.includes("\n"));
  assert.match(describeWorst([NaN], [1], compareArrays([NaN], [1], TOL)), /^array\[0\]: got NaN/);
});

Deno.test("assertClose throws the description, returns the comparison when close", () => {
  assert.throws(
    () => assertClose([1, 2], [1, 3], { ...TOL, name: "loss" }),
    /^Error: loss\[1\]: got 2\.000000, want 3\.000000/,
  );
  assert.equal(assertClose([1, 2], [1, 2], TOL).ok, true);
});
