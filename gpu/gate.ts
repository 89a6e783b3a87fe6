/**
 * Gates: passes that run or not by a flag a kernel wrote on the GPU, without a read back. Two
 * records of one job, each under its gate (want 1 and want 0), and a kernel that writes the flag
 * between them and the work before: only one of the two does any work, and the host never waits.
 *
 * Under {@link PreparedGate.under}, every dispatch of every pass becomes an indirect dispatch whose
 * workgroup counts sit in a small buffer of the pass (`args`), filled by *arm* dispatches that
 * copy the counts into it, or zeros where `flag[0]` differs from `want` (zero workgroups: the
 * dispatch does nothing). A pass's direct dispatches take their counts from a second buffer the
 * host writes when the pass closes (before the submission, as uniform blocks are written), armed
 * once before the first of them; an indirect dispatch under a gate gets an arm dispatch of its own just before it,
 * copying its counts from where the recorded work put them. Each arm dispatch is one workgroup
 * of a few microseconds.
 *
 * Gates nest: under two, the inner gate's dispatches (its arm and its indirect work) are the
 * outer gate's, so a dispatch does its work only where each flag equals its gate's `want`. Where
 * the outer flag closes, the inner arm does not run and whatever its counts hold is zeroed by the
 * outer arm. A pass under n gates holds at most {@link GATE_CAPACITY} − (n − 1) direct dispatches
 * (each inner gate's arm is a direct dispatch of the gate outside it).
 * @module
 */
import type { GpuContext, TrackedBuffer } from "./context.ts";
import type { PassEncoder, Recorder } from "./recorder.ts";
import { compileKernel, signature, u32s } from "./signature.ts";

/** Direct dispatches a gated pass may hold. */
export const GATE_CAPACITY = 64;

/**
 * Records `items` in order in as few passes labelled `label` as {@link GATE_CAPACITY} allows, an
 * item taking `dispatches(item)` of a pass's dispatches: under a gate a pass costs its arm and its
 * timestamps even where it does nothing.
 */
export function recordGatedPasses<T>(
  rec: Recorder,
  label: string,
  items: readonly T[],
  dispatches: (item: T) => number,
  record: (item: T, pass: PassEncoder) => void,
): void {
  for (let i = 0; i < items.length;) {
    let j = i, held = 0;
    while (j < items.length && held + dispatches(items[j]) <= GATE_CAPACITY) {
      held += dispatches(items[j++]);
    }
    if (j === i) {
      throw new RangeError(`gate: an item of "${label}" has over ${GATE_CAPACITY} dispatches`);
    }
    const group = items.slice(i, j);
    rec.pass(label, (pass) => group.forEach((x) => record(x, pass)));
    i = j;
  }
}

/** The arm kernel's signature: `words` words from src[src…] to args[dst…], or zeros. */
export const GATE_ARM_SIG = signature({
  params: u32s("src dst words want"),
  bindings: {
    flag: { elem: "u32", access: "read" },
    src: { elem: "u32", access: "read" },
    args: { elem: "u32", access: "read_write" },
  },
});

/** WGSL of the arm kernel ({@link GATE_ARM_SIG}, one workgroup). */
export function gateArmWgsl(): string {
  return `${GATE_ARM_SIG.wgsl}
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32) {
  let on = flag[0] == P.want;
  for (var i = lid; i < P.words; i += 64u) {
    args[P.dst + i] = select(0u, src[P.src + i], on);
  }
}
`;
}

/** The compiled arm kernel. */
export interface PreparedGate {
  /**
   * Records `fn` with every dispatch of its passes gated: they do their work only where
   * `flag` (its first u32, written earlier on the GPU) equals `want`.
   */
  under(rec: Recorder, o: { flag: TrackedBuffer; want: number }, fn: () => void): void;
}

/** Compiles the arm kernel. */
export async function prepareGate(ctx: GpuContext): Promise<PreparedGate> {
  const arm = await compileKernel(ctx, GATE_ARM_SIG, gateArmWgsl(), "gate arm");
  return {
    under(rec, o, fn) {
      rec.under({
        open(raw: PassEncoder, label: string) {
          const bytes = GATE_CAPACITY * 12;
          const args = ctx.createBuffer({
            size: bytes,
            role: "params",
            label: `${label}: gated dispatches`,
            usage: GPUBufferUsage.INDIRECT,
          });
          const counts = ctx.createBuffer({
            size: bytes,
            role: "params",
            label: `${label}: counts`,
          });
          rec.release(args, counts);
          const host = new Uint32Array(GATE_CAPACITY * 3);
          let slots = 0, armed = false;
          const slot = () => {
            if (slots === GATE_CAPACITY) {
              throw new RangeError(`gate: pass "${label}" has over ${GATE_CAPACITY} dispatches`);
            }
            return slots++;
          };
          const armFrom = (src: TrackedBuffer, p: { src: number; dst: number; words: number }) =>
            raw.dispatch(
              arm.pipeline,
              arm.bind(rec, { ...p, want: o.want }, { flag: o.flag, src, args }),
              1,
            );
          return {
            encoder: {
              dispatch(pipeline, bindGroup, x, y = 1, z = 1) {
                if (x === 0 || y === 0 || z === 0) return;
                // the counts of every direct dispatch, armed once before the first of them
                if (!armed) armFrom(counts, { src: 0, dst: 0, words: GATE_CAPACITY * 3 });
                armed = true;
                const s = slot();
                host.set([x, y, z], 3 * s);
                raw.dispatchIndirect(pipeline, bindGroup, args, 12 * s);
              },
              dispatchIndirect(pipeline, bindGroup, src, offset) {
                const s = slot();
                armFrom(src, { src: offset / 4, dst: 3 * s, words: 3 });
                raw.dispatchIndirect(pipeline, bindGroup, args, 12 * s);
              },
            },
            close() {
              ctx.device.queue.writeBuffer(counts.buffer, 0, host);
            },
          };
        },
      }, fn);
    },
  };
}
