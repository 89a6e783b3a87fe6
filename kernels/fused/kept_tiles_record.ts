/**
 * The records of the fused backward's tile passes (kernels/fused/kept_tiles.ts generates them):
 * per pair of token and vocabulary segments one dispatch, its params and bindings packed through
 * the pass's signature.
 * @module
 */
import type { TrackedBuffer } from "../../gpu/context.ts";
import type { Recorder } from "../../gpu/recorder.ts";
import type { DeviceTensor } from "../../gpu/tensor.ts";
import type { KernelOf } from "../../gpu/signature.ts";
import type { DESlab, TileSegment } from "./backward_plan.ts";
import type { tilePassSignature } from "./kept_tiles.ts";

/** What the records of the tile passes share. */
export interface TileRecordOptions {
  rec: Recorder;
  kernel: KernelOf<ReturnType<typeof tilePassSignature>>;
  e: DeviceTensor;
  c: DeviceTensor;
  /** Token and vocabulary segments, and the vocab tiles in all. */
  tok: TileSegment[];
  voc: TileSegment[];
  vTotal: number;
  d: number;
  /** The bindings after the output: lse, w, [perm], [mask]. */
  tail: { lse: TrackedBuffer; w: TrackedBuffer; perm?: TrackedBuffer; mask?: TrackedBuffer };
}

/** The params block of a tile pass's dispatch (see {@link tilePassWgsl}). */
function _tileParams(o: TileRecordOptions, x: {
  ts: TileSegment;
  eR0: number;
  vs: TileSegment;
  cR0: number;
  oR0: number;
  nOuter: number;
  lo: number;
  hi: number;
  sRows?: number;
}) {
  const { ts, vs } = x;
  return {
    tS: ts.start,
    tE: ts.end,
    eR0: x.eR0,
    vS: vs.start,
    vE: vs.end,
    cR0: x.cR0,
    oR0: x.oR0,
    d: o.d,
    tBase: ts.base,
    vBase: vs.base,
    vTotal: o.vTotal,
    nOuter: x.nOuter,
    lo: x.lo,
    hi: x.hi,
    sRows: x.sRows ?? 0,
  };
}

/**
 * Records pass `dE`: per (token segment, vocab segment) one dispatch of the owned row slices ×
 * the splits. Split s (workgroup_id.y) accumulates into slab part s at row offset s·rows (oR0
 * wraps around in u32: the kernel's (row − oR0 + s·rows)·d is then the offset), or, with an f32
 * output and one split (no slabs), into dE itself.
 */
export function recordDEPass(
  o: TileRecordOptions & {
    /** Tokens per row slice. */
    sliceRows: number;
    splits: number;
    slabs: DESlab[];
    dEOut: DeviceTensor;
    /** Balanced splits' bounds. */
    bounds?: TrackedBuffer;
  },
): void {
  const { rec, kernel, e, c, slabs } = o;
  const slabOf = (row: number) => slabs.find((sl) => row < sl.r0 + sl.rows)!;
  rec.pass("fused backward dE", (p) => {
    for (const ts of o.tok) {
      const es = e.shardOf(ts.start);
      const owned = Math.ceil((ts.end - ts.start) / o.sliceRows);
      // one split into an f32 output: dE itself; else the slab holding the segment
      const sl = slabs.length === 0 ? undefined : slabOf(ts.start);
      const os = sl ? undefined : o.dEOut.shardOf(ts.start);
      const [buffer, oR0, sRows] = sl ? [sl.buffer, sl.r0, sl.rows] : [os!.buffer, os!.rowStart, 0];
      for (const vs of o.voc) {
        const cs = c.shardOf(vs.start);
        const params = _tileParams(o, {
          ts,
          eR0: es.rowStart,
          vs,
          cR0: cs.rowStart,
          oR0,
          nOuter: owned,
          lo: 0,
          hi: vs.tiles,
          sRows,
        });
        const bg = kernel.bind(rec, params, {
          e: es.buffer,
          c: cs.buffer,
          outp: buffer,
          ...o.tail,
          bounds: o.bounds,
        });
        p.dispatch(kernel.pipeline, bg, Math.min(owned, 65535), o.splits);
      }
    }
  });
}

/** Records pass `dC`: per (vocab segment, token segment) one dispatch of the owned vocab tiles. */
export function recordDCPass(
  o: TileRecordOptions & {
    dC: DeviceTensor;
    /** The vocab tiles' order (kernels/fused/dc_order.ts), for a pass compiled `ordered`. */
    order?: TrackedBuffer;
    /** For a pass compiled `foldTargets`: targets (n i32), a_n (n f32), the tokens' flags. */
    fold?: { targets: TrackedBuffer; coef: TrackedBuffer; folded: TrackedBuffer };
    /** For a pass compiled `split`: slots for up to twice the segment's tiles (≤ 1,024 workgroups). */
    split?: boolean;
  },
): void {
  const { rec, kernel, e, c, dC } = o;
  rec.pass("fused backward dC", (p) => {
    for (const vs of o.voc) {
      const cs = c.shardOf(vs.start), os = dC.shardOf(vs.start);
      // split: slots for up to twice the tiles; those past the segments stop at once, so fewer
      // workgroups may take several
      const slots = o.split ? 2 * vs.tiles : vs.tiles;
      const groups = Math.min(o.split ? 1024 : 65535, slots);
      for (const ts of o.tok) {
        const es = e.shardOf(ts.start);
        const params = _tileParams(o, {
          ts,
          eR0: es.rowStart,
          vs,
          cR0: cs.rowStart,
          oR0: os.rowStart,
          nOuter: slots,
          lo: 0,
          hi: ts.tiles,
        });
        const bg = kernel.bind(rec, params, {
          e: es.buffer,
          c: cs.buffer,
          outp: os.buffer,
          ...o.tail,
          order: o.order,
          ...o.fold,
        });
        p.dispatch(kernel.pipeline, bg, groups);
      }
    }
  });
}
