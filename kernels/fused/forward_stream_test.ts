import assert from "node:assert/strict";
import { streamOwner, streamPlan } from "./forward_stream.ts";

/** Each workgroup's tiles by brute force: ⌊w·total/W⌋ … ⌊(w + 1)·total/W⌋ − 1. */
function _shares(total: number, wgs: number): number[][] {
  return Array.from({ length: wgs }, (_, w) => {
    const out: number[] = [];
    for (let x = Math.floor((w * total) / wgs); x < Math.floor(((w + 1) * total) / wgs); x++) {
      out.push(x);
    }
    return out;
  });
}

Deno.test("stream split: every tile held once, in order; slots are the most workgroups a block has", () => {
  const cases = [[3, 10, 7], [3, 10, 30], [1, 1, 1], [64, 1000, 264], [32, 96, 132], [5, 7, 3]];
  for (const [blocks, tiles, wgs] of cases) {
    const total = blocks * tiles;
    const shares = _shares(total, wgs);
    assert.deepEqual(shares.flat(), Array.from({ length: total }, (_, x) => x), "a partition");
    const owners = new Map<number, Set<number>>();
    shares.forEach((xs, w) => {
      for (const x of xs) {
        assert.equal(streamOwner(x, total, wgs), w, `owner of ${x} of ${total} over ${wgs}`);
        const b = Math.floor(x / tiles);
        owners.set(b, (owners.get(b) ?? new Set()).add(w));
      }
    });
    const plan = streamPlan(blocks, tiles, wgs)!;
    assert.equal(plan.slots, Math.max(...[...owners.values()].map((s) => s.size)));
    assert.equal(plan.wgs, wgs);
  }
  // more workgroups than tiles: one tile each
  assert.equal(streamPlan(2, 3, 10)!.wgs, 6);
  // the paper's shape on 264 workgroups (242.4 tiles each): a block is shared by at most 5
  assert.equal(streamPlan(64, 1000, 264)!.slots, 5);
  // total·W must fit the kernel's u32 arithmetic
  assert.equal(streamPlan(70000, 1000, 264), undefined);
});
