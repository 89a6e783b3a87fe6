import assert from "node:assert/strict";
import { type GemmTile, TILE_HW, TILE_LARGE, TILE_SMALL } from "../gemm_codegen.ts";
import {
  defaultRoundRows,
  fusedTilesWgsl,
  fusedTilesWorkgroupBytes,
  tileRowsPerRound,
  type TileState,
} from "./forward_tiles.ts";

const SCALAR_BYTES: Record<string, number> = { f32: 4, u32: 4, i32: 4 };

/** Bytes of a WGSL workgroup type: scalars, vec2/vec4 and (nested) fixed-size arrays. */
function typeBytes(ty: string): number {
  const arr = /^array<(.+),\s*(\d+)u?>$/.exec(ty);
  if (arr) return typeBytes(arr[1].trim()) * Number(arr[2]);
  const vec = /^vec(\d)<(\w+)>$/.exec(ty);
  if (vec) return Number(vec[1]) * SCALAR_BYTES[vec[2]];
  assert.ok(ty in SCALAR_BYTES, `unknown type ${ty}`);
  return SCALAR_BYTES[ty];
}

/** Name → bytes of every `var<workgroup>` the source declares. */
function workgroupVars(src: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of src.matchAll(/var<workgroup>\s+(\w+)\s*:\s*(.+?);/g)) {
    out.set(m[1], typeBytes(m[2].trim()));
  }
  return out;
}

/** Binding names in binding order. */
function bindingNames(src: string): string[] {
  return [...src.matchAll(/@binding\((\d+)\) var(?:<[^>]*>)? (\w+)/g)].map((m, i) => {
    assert.equal(Number(m[1]), i, "bindings numbered in order");
    return m[2];
  });
}

const VARIANTS = [false, true].flatMap((sumZ) =>
  [false, true].flatMap((stats) =>
    (["tile", "registers"] as TileState[]).map((state) => ({ sumZ, stats, state }))
  )
);

Deno.test("fused tiles WGSL: each variant switch adds exactly its bindings, scratch and helpers", () => {
  for (const softcap of [undefined, 30]) {
    for (const { sumZ, stats, state } of VARIANTS) {
      const tag = JSON.stringify({ softcap, sumZ, stats, state });
      const src = fusedTilesWgsl({ tile: TILE_SMALL, dtype: "bf16", softcap, sumZ, stats, state });
      const want = ["P", "e", "c", "targets", "ws"];
      if (sumZ) want.push("wsz");
      if (stats) want.push("wsx");
      want.push("zt");
      assert.deepEqual(bindingNames(src), want, tag);
      assert.match(src, stats ? /var<storage, read_write> ws: array<vec2<f32>>/ : /ws: array<f32>/);
      assert.equal(src.includes("const SOFTCAP"), softcap !== undefined, tag);
      assert.equal(src.includes("fn lse_merge"), state === "registers", tag);
      assert.equal(src.includes("fn stats_merge"), stats && state === "registers", tag);
      const vars = [...workgroupVars(src).keys()];
      const scratch = state === "registers"
        ? ["red_ms", ...(sumZ ? ["red_z"] : []), ...(stats ? ["red_x"] : [])]
        : [
          "sh_tg",
          "scr_m",
          "scr_s",
          ...(sumZ ? ["scr_z"] : []),
          ...(stats ? ["scr_a", "scr_w"] : []),
        ];
      assert.deepEqual(vars.filter((n) => !/^(As|Bs)$/.test(n)), scratch, tag);
      assert.doesNotMatch(src, /undefined|NaN|\[object/, tag);
    }
  }
});

Deno.test("fused tiles WGSL: workgroup bytes are those of the declared arrays", () => {
  const tiles: GemmTile[] = [TILE_SMALL, TILE_LARGE, TILE_HW, { ...TILE_SMALL, bk: 8 }];
  for (const tile of tiles) {
    for (const { sumZ, stats, state } of VARIANTS) {
      for (const roundRows of state === "tile" ? [undefined, 1, tile.tm] : [undefined]) {
        const src = fusedTilesWgsl({
          tile,
          dtype: "f16",
          sumZ,
          stats,
          state,
          roundRows,
          vecLoads: tile.vec,
        });
        let declared = 0;
        for (const b of workgroupVars(src).values()) declared += b;
        const o = { sumZ, stats, state, roundRows };
        assert.equal(declared, fusedTilesWorkgroupBytes(tile, o), JSON.stringify({ tile, ...o }));
      }
    }
  }
});

Deno.test("fused tiles: rows per round divide TM and fit the limit; bad options throw", () => {
  for (const tile of [TILE_SMALL, TILE_HW, { ...TILE_LARGE, tm: 16, bm: 256 }]) {
    assert.equal(tile.tm % tileRowsPerRound(tile), 0);
    for (const o of [{ sumZ: false, stats: false }, { sumZ: true, stats: true }]) {
      for (const limit of [16384, 32768, 65536]) {
        const r = defaultRoundRows(tile, o, limit);
        const bytes = (rr: number) => fusedTilesWorkgroupBytes(tile, { ...o, roundRows: rr });
        assert.equal(tile.tm % r, 0);
        // the largest that fits, unless even one row per round does not
        assert.ok(r === 1 || bytes(r) <= limit, `${r} rows: ${bytes(r)} > ${limit}`);
        assert.ok(2 * r > tile.tm || bytes(2 * r) > limit, `${2 * r} rows would fit ${limit}`);
      }
    }
  }
  const base = { dtype: "f32", sumZ: false, stats: false } as const;
  assert.throws(() => fusedTilesWgsl({ ...base, tile: TILE_SMALL, roundRows: 3 }), /must divide/);
  // 64 threads for 128 rows: no owner thread per row
  const tall = { bm: 128, bn: 16, bk: 16, tm: 8, tn: 4 };
  assert.throws(() => fusedTilesWgsl({ ...base, tile: tall }), /BM ≤ threads/);
  assert.doesNotThrow(() => fusedTilesWgsl({ ...base, tile: tall, state: "registers" }));
});
