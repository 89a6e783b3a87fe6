/**
 * A deliberately wrong method for the tests of the correctness check: the built-in baseline with
 * its dC cleared to zeros after the backward (loss and dE stay right), under its own name.
 * @module
 */
import type { LceMethod } from "../../mod.ts";
import { baseline } from "../../methods/baseline.ts";

const zeroDc: LceMethod = {
  ...baseline,
  name: "zero-dc",
  label: "Baseline with dC zeroed (wrong on purpose)",
  description: "the baseline, then dC overwritten with zeros",
  async prepare(ctx, spec, opts) {
    const p = await baseline.prepare(ctx, spec, opts);
    return {
      ...p,
      async backward(rec, x, saved, gradOut) {
        const g = await p.backward(rec, x, saved, gradOut);
        for (const s of g.dC.shards) rec.clear(s.buffer);
        return g;
      },
    };
  },
};

export default zeroDc;
