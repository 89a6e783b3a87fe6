/**
 * File-name slugs: text lowercased, every run of other characters than a–z and 0–9 made one `-`,
 * no `-` at either end, at most 48 characters.
 * @module
 */

/** The slug of `text` (`llvmpipe (LLVM 15.0.6, 256 bits)` → `llvmpipe-llvm-15-0-6-256-bits`). */
export function slug(text: string, fallback = "unknown"): string {
  return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 48)
    .replace(/-+$/, "") || fallback;
}
