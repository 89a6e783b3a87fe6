/**
 * A deliberately wrong method for the tests of the correctness check: the built-in fused method
 * with f32 gradients, its dC cleared to zeros after the backward (loss and dE stay right), under
 * its own name.
 * @module
 */
import type { LceMethod } from "../../mod.ts";
import { fusedF32Grad } from "../../methods/fused.ts";

const zeroDc: LceMethod = {
  ...fusedF32Grad,
  name: "zero-dc",
  label: "Fused with dC zeroed (wrong on purpose)",
  description: "fused-f32grad, then dC overwritten with zeros",
  async prepare(ctx, spec, opts) {
    const p = await fusedF32Grad.prepare(ctx, spec, opts);
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
