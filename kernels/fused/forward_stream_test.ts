import assert from "node:assert/strict";
import { streamOwner, streamPlan } from "./forward_stream.ts";

/**
 * Each workgroup's tiles by brute force, as global (block-major) indices: in each group of
 * `group` blocks, ⌊w·total/W⌋ … ⌊(w + 1)·total/W⌋ − 1 of the group's tiles.
 */
function _shares(blocks: number, tiles: number, wgs: number, group: number): number[][] {
  const out: number[][] = Array.from({ length: wgs }, () => []);
  for (let b0 = 0; b0 < blocks; b0 += group) {
    const total = Math.min(group, blocks - b0) * tiles;
    for (let w = 0; w < wgs; w++) {
      for (let x = Math.floor((w * total) / wgs); x < Math.floor(((w + 1) * total) / wgs); x++) {
        out[w].push(b0 * tiles + x);
      }
    }
  }
  return out;
}

Deno.test("stream split: every tile held once; slots are the most workgroups a block has", () => {
  const cases = [
    [3, 10, 7, 3],
    [3, 10, 30, 3],
    [1, 1, 1, 1],
    [64, 1000, 264, 64],
    [32, 96, 132, 32],
    [5, 7, 3, 5],
    [3, 10, 7, 1],
    [3, 10, 7, 2],
    [64, 1000, 132, 33],
    [32, 96, 132, 16],
  ];
  for (const [blocks, tiles, wgs, group] of cases) {
    const shares = _shares(blocks, tiles, wgs, group);
    const all = shares.flat().sort((a, b) => a - b);
    assert.deepEqual(all, Array.from({ length: blocks * tiles }, (_, x) => x), "a partition");
    const owners = new Map<number, Set<number>>();
    shares.forEach((xs, w) => {
      for (const x of xs) {
        const b = Math.floor(x / tiles), b0 = b - (b % group);
        const total = Math.min(group, blocks - b0) * tiles;
        assert.equal(streamOwner(x - b0 * tiles, total, wgs), w, `owner of ${x}`);
        owners.set(b, (owners.get(b) ?? new Set()).add(w));
      }
    });
    const plan = streamPlan(blocks, tiles, wgs, group)!;
    assert.equal(plan.slots, Math.max(...[...owners.values()].map((s) => s.size)));
    assert.deepEqual([plan.wgs, plan.group], [wgs, group]);
  }
  // more workgroups than tiles: one tile each; never more than the smallest group's tiles, so
  // that no slot between two workgroups' pieces goes unwritten
  assert.equal(streamPlan(2, 3, 10)!.wgs, 6);
  assert.equal(streamPlan(3, 10, 13, 2)!.wgs, 10);
  assert.equal(streamPlan(3, 10, 13, 1)!.slots, 10);
  // the paper's shape on 264 workgroups (242.4 tiles each): a block is shared by at most 5
  assert.equal(streamPlan(64, 1000, 264)!.slots, 5);
  // on 132 in groups of 33 blocks: the first group's blocks in exact quarters, the second's
  // blocks in shares of 234.8 tiles, up to 6 a block
  assert.equal(streamPlan(64, 1000, 132, 33)!.slots, 6);
  // a group's tiles × W must fit the kernel's u32 arithmetic
  assert.equal(streamPlan(70000, 1000, 264), undefined);
  assert.ok(streamPlan(70000, 1000, 264, 64));
});
