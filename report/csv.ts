/**
 * CSV encoding of report rows (RFC 4180): a field is quoted when it holds a quote, a comma or a
 * line break, with its quotes doubled; null and undefined are empty fields; objects are JSON.
 * @module
 */

/** Characters that make a field quoted: the double quote, the comma, CR and LF. */
const _NEEDS_QUOTES = /[\u0022,\r\n]/;

/** One CSV field. */
export function csvField(x: unknown): string {
  if (x === null || x === undefined) return "";
  const s = typeof x === "string" ? x : typeof x === "number" ? String(x) : JSON.stringify(x);
  return _NEEDS_QUOTES.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

/** Lines of fields as CSV text: CRLF line ends, one after the last line. */
export function csvText(lines: readonly (readonly unknown[])[]): string {
  return lines.map((l) => l.map(csvField).join(",")).join("\r\n") + "\r\n";
}
