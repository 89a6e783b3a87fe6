import assert from "node:assert/strict";
import { join } from "node:path";
import { InputError } from "../core/errors.ts";
import { HARNESS_VERSION } from "../core/version.ts";
import { reportCells } from "./compare_cells.ts";
import {
  formatHistory,
  HISTORY_COLUMNS,
  historyRows,
  parseCsv,
  readHistory,
  upsertHistory,
} from "./history.ts";
import { historySvg, selectHistory } from "../report/history_svg.ts";
import { tempDir } from "../testing/temp_dir.ts";

/** A table3-like report of one commit with `ms` as every cell's samples. */
function _report(commit: string, ms: number[], o: { dirty?: boolean; date?: string } = {}) {
  return reportCells({
    env: {
      adapter: { description: 'llvmpipe "x", y', engine: "deno" },
      date: o.date ?? "2026-11-25T10:00:00Z",
      git: { commit, dirty: o.dirty ?? false },
    },
    shape: { n: 8, v: 16, d: 4, dtype: "f32" },
    fixture: "cce",
    reduction: "mean",
    rows: [
      { method: "fused", label: "Ours", beta: 0.1, mode: "fwd", timeMs: 1, timeMsSamples: ms },
      { method: "fused", label: "Ours", beta: 0.1, mode: "bwd", timeMs: null, error: "OOM, x" },
      {
        method: "base",
        label: "B",
        beta: 0,
        mode: "fwd",
        timeMs: 2,
        timeMsSamples: ms.map((x) => 2 * x),
        peakBytes: 64,
        check: { ok: true, error: 1e-6, worst: "loss" },
      },
    ],
  }, "r.json");
}

Deno.test("history: rows carry percentiles, the check, the version; CSV round-trips", () => {
  const rows = historyRows(_report("c".repeat(40), [1, 2, 3, 4, 5], { dirty: true }));
  assert.equal(rows.length, 3);
  const [fwd, failed, base] = rows;
  assert.equal(fwd.commit, "c".repeat(40) + "+dirty");
  assert.deepEqual(
    [fwd.time_ms_p20, fwd.time_ms_p50, fwd.time_ms_p80, fwd.time_ms_min, fwd.time_ms_max],
    ["1.8", "3", "4.2", "1", "5"],
  );
  assert.equal(fwd.harness_version, HARNESS_VERSION);
  assert.equal(fwd.unit, "ms");
  assert.equal(failed.time_ms_p50, "");
  assert.equal(failed.error, "OOM, x");
  assert.equal(base.check_ok, "true");
  assert.equal(base.peak_bytes, "64");
  const text = formatHistory(rows);
  const recs = parseCsv(text);
  assert.deepEqual(recs[0], [...HISTORY_COLUMNS]);
  assert.equal(recs[1][HISTORY_COLUMNS.indexOf("adapter")], 'llvmpipe "x", y');
  assert.deepEqual(parseCsv('a,"b\r\nc",""\r\n'), [["a", "b\r\nc", ""]]);
});

Deno.test("history: upsert replaces a cell of the same commit, appends another commit's", async () => {
  const dir = await tempDir("lce_history_");
  const path = join(dir, "h.csv");
  assert.deepEqual(readHistory(path), []);
  assert.deepEqual(upsertHistory(path, _report("a".repeat(40), [1, 1])), {
    added: 3,
    replaced: 0,
    total: 3,
  });
  const again = upsertHistory(path, _report("a".repeat(40), [3, 3], { date: "2026-11-25T11:00Z" }));
  assert.deepEqual(again, { added: 0, replaced: 3, total: 3 });
  assert.equal(readHistory(path)[0].time_ms_p50, "3");
  const next = upsertHistory(path, _report("b".repeat(40), [2, 2], { date: "2026-11-26T00:00Z" }));
  assert.deepEqual(next, { added: 3, replaced: 0, total: 6 });
  const rows = readHistory(path);
  const drawn = selectHistory(rows, { method: "fused" });
  assert.deepEqual(drawn.map((r) => [r.commit.slice(0, 1), r.time_ms_p50]), [["a", "3"], [
    "b",
    "2",
  ]]);
  assert.deepEqual(selectHistory(rows, { method: "fused", mode: "bwd" }), [], "failed: not drawn");
  const svg = await historySvg(drawn, "fused");
  assert.match(svg, /^<svg/);
  assert.match(svg, /fused: time across commits/);
  assert.match(svg, /aaaaaaaaaa/);
  // not a history: refused, and the file is left as it was
  const bad = join(dir, "bad.csv");
  await Deno.writeTextFile(bad, "adapter,n\r\nx,1\r\n");
  assert.throws(() => upsertHistory(bad, _report("a".repeat(40), [1])), (e: unknown) => {
    assert.ok(e instanceof InputError);
    assert.match(e.message, /bad\.csv: not a history file of this harness/);
    return true;
  });
  assert.equal(await Deno.readTextFile(bad), "adapter,n\r\nx,1\r\n");
  await Deno.writeTextFile(bad, formatHistory([]) + "a,b\r\n");
  assert.throws(() => readHistory(bad), /line 2 has 2 fields, expected 27/);
  assert.throws(() => readHistory(dir), /a directory, not a history file/);
});
