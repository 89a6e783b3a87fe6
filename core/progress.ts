/**
 * Command-line output that follows the platform: colour only on a terminal and only when
 * `NO_COLOR` is unset ({@link paint}), and progress of a long run with an estimate of the time
 * left ({@link Progress}): a bar redrawn on the last line on a terminal, plain lines otherwise
 * (a log file or a pipe gets no carriage returns and no escape codes).
 * @module
 */
import { styleText } from "node:util";

/** Where progress and coloured text go (Deno.stderr, Deno.stdout, or a test double). */
export interface OutputStream {
  /** Whether the stream is an interactive terminal. */
  isTerminal(): boolean;
  /** Writes bytes synchronously; returns the count written. */
  writeSync(p: Uint8Array): number;
}

/** A format of node:util styleText ("red", "dim", "bold", ...). */
export type TextFormat = Parameters<typeof styleText>[0];

/** Whether `NO_COLOR` is set to a non-empty value (https://no-color.org). */
export function noColor(): boolean {
  // Deno.noColor needs no permission; the variable is read again when env access is granted so
  // that a test can set it in-process.
  try {
    const v = Deno.env.get("NO_COLOR");
    if (v !== undefined) return v !== "";
  } catch {
    // no env permission: fall back to Deno's own reading at start-up
  }
  return Deno.noColor;
}

/** Whether text written to `stream` may carry colour codes: a terminal, and NO_COLOR unset. */
export function colorEnabled(stream: OutputStream = Deno.stderr): boolean {
  return !noColor() && _isTerminal(stream);
}

/**
 * `text` styled with `format` for `stream` (default stderr), or `text` unchanged when the stream
 * is not a terminal or NO_COLOR is set. (node:util styleText alone emits the codes into pipes.)
 */
export function paint(
  format: TextFormat,
  text: string,
  stream: OutputStream = Deno.stderr,
): string {
  return colorEnabled(stream) ? styleText(format, text, { validateStream: false }) : text;
}

function _isTerminal(stream: OutputStream): boolean {
  try {
    return stream.isTerminal();
  } catch {
    return false;
  }
}

/** `1 h 02 min`, `3 min 05 s`, `42 s` for a duration in seconds. */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/** Options of {@link Progress}. */
export interface ProgressOptions {
  /** Prefix of every line (the command's name, e.g. "table3"). */
  label: string;
  /** Total work, in the units of {@link Progress.step}'s weight (e.g. cells, or cells × flops). */
  total: number;
  /** Where to write (default stderr). */
  stream?: OutputStream;
  /** Clock in ms (default performance.now). */
  now?: () => number;
  /** No estimate before this many seconds have passed (default 2): early rates mislead. */
  etaAfterS?: number;
  /** Width of the bar in characters (default 24). */
  barWidth?: number;
}

/**
 * Progress of a run of weighted steps. Each {@link step} prints its line (prefixed with the
 * label) and the estimate of the time left, from the rate so far: elapsed / done × remaining
 * weight. On a terminal the estimate sits in a bar on the last line, redrawn after each step and
 * cleared by {@link done}; elsewhere it is appended to the step's line (`— about 3 min 05 s
 * left`). No escape codes are written unless {@link colorEnabled}; the bar itself uses only `\r`
 * and spaces.
 */
export class Progress {
  readonly #o: Required<Omit<ProgressOptions, "stream">> & { stream: OutputStream };
  readonly #t0: number;
  readonly #enc = new TextEncoder();
  #done = 0;
  #count = 0;
  #barShown = 0;

  /** Starts the clock. */
  constructor(o: ProgressOptions) {
    this.#o = {
      stream: o.stream ?? Deno.stderr,
      now: o.now ?? (() => performance.now()),
      etaAfterS: o.etaAfterS ?? 2,
      barWidth: o.barWidth ?? 24,
      label: o.label,
      total: Math.max(0, o.total),
    };
    this.#t0 = this.#o.now();
  }

  /** Work done so far. */
  get done(): number {
    return this.#done;
  }

  /** Seconds since the start. */
  elapsedS(): number {
    return (this.#o.now() - this.#t0) / 1000;
  }

  /** Estimated seconds left, or undefined before any work is done or too early to say. */
  etaS(): number | undefined {
    const el = this.elapsedS();
    if (this.#done <= 0 || el < this.#o.etaAfterS) return undefined;
    return Math.max(0, (el / this.#done) * (this.#o.total - this.#done));
  }

  /** Records `weight` units of work done and prints `text` with the progress so far. */
  step(text: string, weight = 1): void {
    this.#done = Math.min(this.#o.total, this.#done + weight);
    this.#count++;
    const eta = this.etaS();
    if (this.#terminal()) {
      this.#write(`${this.#clearBar()}${this.#prefix()}${text}\n`);
      this.#drawBar(eta);
    } else {
      const left = eta !== undefined && this.#done < this.#o.total
        ? ` — about ${formatDuration(eta)} left`
        : "";
      this.#write(`${this.#prefix()}${text}${left}\n`);
    }
  }

  /** Prints a line that is not a step (a note, a warning). */
  log(text: string): void {
    if (this.#terminal()) {
      this.#write(`${this.#clearBar()}${this.#prefix()}${text}\n`);
      this.#drawBar(this.etaS());
    } else {
      this.#write(`${this.#prefix()}${text}\n`);
    }
  }

  /** Clears the bar (terminal); call when the run ends. */
  finish(): void {
    if (this.#terminal()) this.#write(this.#clearBar());
  }

  #prefix(): string {
    return paint("dim", `${this.#o.label}: `, this.#o.stream);
  }

  #terminal(): boolean {
    return _isTerminal(this.#o.stream);
  }

  #write(s: string): void {
    if (s === "") return;
    const b = this.#enc.encode(s);
    let off = 0;
    while (off < b.length) off += this.#o.stream.writeSync(b.subarray(off));
  }

  #clearBar(): string {
    if (this.#barShown === 0) return "";
    const s = `\r${" ".repeat(this.#barShown)}\r`;
    this.#barShown = 0;
    return s;
  }

  #drawBar(eta: number | undefined): void {
    const { total, barWidth } = this.#o;
    if (total <= 0 || this.#done >= total) return;
    const frac = this.#done / total;
    const full = Math.round(frac * barWidth);
    const bar = "#".repeat(full) + "-".repeat(barWidth - full);
    const left = eta === undefined ? "estimating time left" : `about ${formatDuration(eta)} left`;
    const text = `[${bar}] ${(100 * frac).toFixed(0)}%, ${left}`;
    this.#write(`\r${paint("cyan", text, this.#o.stream)}`);
    this.#barShown = text.length;
  }
}
