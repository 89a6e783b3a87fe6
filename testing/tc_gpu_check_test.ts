/** The GPU check's bookkeeping: a forced path it never saw taken fails its line. */
import assert from "node:assert/strict";
import { checkTaken, type TcCheckLine } from "./tc_gpu_check.ts";
import type { LceMethod } from "../methods/types.ts";

Deno.test("tc check: a forced path fails unless some passing case took it", () => {
  const m = { name: "fused-tc-dense" } as LceMethod;
  const line = (ok: boolean, detail: string): TcCheckLine => ({
    method: m.name,
    case: "x",
    ok,
    detail,
    ms: 0,
  });
  const run = (lines: TcCheckLine[]) => {
    const out: TcCheckLine[] = [];
    checkTaken(lines, [m], { [m.name]: ["denseDE", "denseDC"] }, (l) => out.push(l));
    return out.map((l) => [l.case, l.ok]);
  };
  const small = line(true, "dE 0.5 (of tolerance); taken: denseDC; does not apply here: denseDE");
  assert.deepEqual(run([small]), [["denseDE taken", false], ["denseDC taken", true]]);
  const both = line(true, "dE 0.5 (of tolerance); taken: denseDE, denseDC");
  assert.deepEqual(run([small, both]), [["denseDE taken", true], ["denseDC taken", true]]);
  // a failing line does not count, nor a line that says it was not taken
  const failed = line(false, "dE 2.0 FAIL …; taken: denseDE, denseDC");
  const missed = line(false, "dE 0.5 (of tolerance); FAIL not taken: denseDE, denseDC");
  assert.deepEqual(run([failed, missed]), [["denseDE taken", false], ["denseDC taken", false]]);
});
