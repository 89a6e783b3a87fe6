import assert from "node:assert/strict";
import { colorEnabled, formatDuration, type OutputStream, paint, Progress } from "./progress.ts";

const ESC = "\x1b";

/** A stream that records what is written; `tty` says whether it claims to be a terminal. */
function _stream(tty: boolean): OutputStream & { text(): string } {
  const chunks: Uint8Array[] = [];
  return {
    isTerminal: () => tty,
    writeSync(p: Uint8Array) {
      chunks.push(p.slice());
      return p.length;
    },
    text: () => new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c]))),
  };
}

/** Runs `fn` with NO_COLOR set to `value` (or unset), restoring it after. */
function _withNoColor(value: string | undefined, fn: () => void): void {
  const old = Deno.env.get("NO_COLOR");
  if (value === undefined) Deno.env.delete("NO_COLOR");
  else Deno.env.set("NO_COLOR", value);
  try {
    fn();
  } finally {
    if (old === undefined) Deno.env.delete("NO_COLOR");
    else Deno.env.set("NO_COLOR", old);
  }
}

/** A clock advanced by hand. */
function _clock() {
  let t = 0;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

Deno.test("paint: colour only on a terminal without NO_COLOR", () => {
  _withNoColor(undefined, () => {
    assert.equal(paint("red", "x", _stream(false)), "x");
    assert.equal(colorEnabled(_stream(false)), false);
    assert.ok(paint("red", "x", _stream(true)).includes(ESC));
  });
  _withNoColor("1", () => {
    assert.equal(paint("red", "x", _stream(true)), "x");
    assert.equal(colorEnabled(_stream(true)), false);
  });
  _withNoColor("", () => assert.ok(colorEnabled(_stream(true)), "empty NO_COLOR is unset"));
});

Deno.test("formatDuration: seconds, minutes, hours", () => {
  assert.equal(formatDuration(42.4), "42 s");
  assert.equal(formatDuration(185), "3 min 05 s");
  assert.equal(formatDuration(3720), "1 h 02 min");
  assert.equal(formatDuration(NaN), "?");
});

Deno.test("Progress off a terminal: plain lines with the time left, no escape codes", () => {
  _withNoColor(undefined, () => {
    const s = _stream(false);
    const c = _clock();
    const p = new Progress({ label: "sweep", total: 4, stream: s, now: c.now });
    c.advance(10_000);
    p.step("cell 1");
    c.advance(10_000);
    p.step("cell 2", 1);
    p.log("a note");
    c.advance(20_000);
    p.step("cells 3 and 4", 2);
    p.finish();
    const out = s.text();
    assert.ok(!out.includes(ESC), JSON.stringify(out));
    assert.ok(!out.includes("\r"), "no carriage returns in a log");
    assert.deepEqual(out.split("\n"), [
      "sweep: cell 1 — about 30 s left",
      "sweep: cell 2 — about 20 s left",
      "sweep: a note",
      "sweep: cells 3 and 4",
      "",
    ]);
  });
});

Deno.test("Progress on a terminal: a bar with the estimate, cleared at the end", () => {
  for (const nc of [undefined, "1"]) {
    _withNoColor(nc, () => {
      const s = _stream(true);
      const c = _clock();
      const p = new Progress({ label: "t", total: 10, stream: s, now: c.now, barWidth: 10 });
      c.advance(3000);
      p.step("one", 5);
      const mid = s.text();
      assert.match(mid, /\[#####-----\] 50%, about 3 s left/);
      p.step("two", 5);
      p.finish();
      const out = s.text();
      assert.equal(out.includes(ESC), nc === undefined, `escape codes only with colour: ${nc}`);
      // after the last step the bar is gone: the text ends with the last line
      const plain = out.replace(new RegExp(`${ESC}\\[[0-9;]*m`, "g"), "");
      assert.ok(plain.trimEnd().endsWith("t: two"), out);
    });
  }
});

Deno.test("Progress: no estimate before etaAfterS or before any work", () => {
  const c = _clock();
  const p = new Progress({ label: "x", total: 3, stream: _stream(false), now: c.now });
  assert.equal(p.etaS(), undefined);
  c.advance(500);
  p.step("a");
  assert.equal(p.etaS(), undefined);
  c.advance(2500);
  assert.equal(p.etaS(), 6);
});
