/**
 * A method for the tests of `compare`: the built-in fused method's work done LCE_TEST_REPEAT times
 * (default 1) per call under one name, so two runs of one commit can differ only in the work.
 * The extra calls' outputs are released after the submission; the last call's are returned.
 * @module
 */
import type { LceMethod, Recorder, SavedState } from "../../mod.ts";
import { fused } from "../../methods/fused.ts";

const times = Number(Deno.env.get("LCE_TEST_REPEAT") ?? "1");

/** Releases every buffer of these tensors after the recorder's next submission. */
function _release(
  rec: Recorder,
  tensors: { shards: { buffer: Parameters<Recorder["release"]>[0] }[] }[],
) {
  for (const t of tensors) for (const s of t.shards) rec.release(s.buffer);
}

const repeat: LceMethod = {
  ...fused,
  name: "repeat",
  label: `Fused ×${times}`,
  description: "the fused forward and backward done LCE_TEST_REPEAT times per call",
  async prepare(ctx, spec, opts) {
    const p = await fused.prepare(ctx, spec, opts);
    return {
      ...p,
      async forward(rec, x) {
        for (let i = 1; i < times; i++) {
          const f = await p.forward(rec, x);
          _release(rec, [f.loss, ...f.saved.tensors]);
        }
        return await p.forward(rec, x);
      },
      async backward(rec, x, saved: SavedState, gradOut) {
        for (let i = 1; i < times; i++) {
          const g = await p.backward(rec, x, saved, gradOut);
          _release(rec, [g.dE, g.dC]);
        }
        return await p.backward(rec, x, saved, gradOut);
      },
    };
  },
};

export default repeat;
