/**
 * Numbers as the reports print them: bytes as the paper's "MB" (MiB), milliseconds, speed ratios
 * (× faster than the baseline), memory savings as signed percentages, and the details table's
 * figures.
 * @module
 */

/** Bytes as the paper's "MB" (MiB): `1,161 MB`, `1.1 MB`, `0.09 MB`. */
export function formatMB(bytes: number): string {
  if (bytes === 0) return "0 MB";
  const mib = bytes / 2 ** 20;
  const text = mib >= 100
    ? mib.toLocaleString("en-US", { maximumFractionDigits: 0 })
    : mib >= 1
    ? mib.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
    : mib.toLocaleString("en-US", { maximumSignificantDigits: 2 });
  return `${text} MB`;
}

/** Milliseconds with one decimal (two significant digits below 1 ms): `24.2 ms`, `0.043 ms`. */
export function formatMs(ms: number): string {
  const text = ms >= 1
    ? ms.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 })
    : ms.toLocaleString("en-US", { maximumSignificantDigits: 2 });
  return `${text} ms`;
}

/** `1.7×`, `0.41×`, `12×`: a speed-up with two significant digits (none after the point ≥ 10). */
export function formatSpeedup(x: number): string {
  const text = x >= 10
    ? x.toLocaleString("en-US", { maximumFractionDigits: 0 })
    : x.toLocaleString("en-US", { minimumSignificantDigits: 2, maximumSignificantDigits: 2 });
  return `${text}×`;
}

/**
 * A memory saving as a signed percentage: `−96%` (less memory), `+35%` (more), and enough
 * decimals near −100% that the remainder shows (`−99.996%`).
 */
export function formatSaving(saving: number): string {
  const pct = 100 * saving;
  const rest = 100 - Math.abs(pct);
  const digits = rest >= 10 ? 0 : rest >= 1 ? 1 : Math.min(4, Math.ceil(-Math.log10(rest)) + 1);
  const text = Math.abs(pct).toLocaleString("en-US", {
    minimumFractionDigits: 0,
    maximumFractionDigits: Number.isFinite(digits) ? digits : 4,
  });
  return `${pct > 0 ? "−" : pct < 0 ? "+" : "±"}${text}%`;
}

/** A number of the details table: `1,146.5`, `24.25`, `0.137`, `0.0000153`. */
export function formatDetail(x: number): string {
  const a = Math.abs(x);
  if (a >= 100) return x.toLocaleString("en-US", { maximumFractionDigits: 1 });
  if (a >= 1) return x.toLocaleString("en-US", { maximumFractionDigits: 2 });
  return x.toLocaleString("en-US", { maximumSignificantDigits: 3 });
}
