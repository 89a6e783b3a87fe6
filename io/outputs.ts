/**
 * All-or-nothing output files: {@link checkOutputs} validates every output path before any work
 * (its directory is, or can be created as, a writable directory; the path is not a directory and
 * not one of the inputs), and {@link writeAllOrNothing} writes every file to a temporary name in
 * its target directory, then renames them all into place; if anything fails, the files that
 * were already replaced get their old contents back, so a failure leaves every pre-existing
 * output byte-identical and no temporary file behind. {@link writeAtomic} does the same for one
 * file rewritten in place (a report saved after every measured cell).
 * @module
 */
import { mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { InputError } from "../core/errors.ts";

function _stat(path: string): Deno.FileInfo | undefined {
  try {
    return Deno.statSync(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound || e instanceof Deno.errors.NotADirectory) {
      return undefined;
    }
    throw new InputError(`${path}: cannot check: ${(e as Error).message.split("\n")[0]}`);
  }
}

function _real(path: string): string {
  try {
    return Deno.realPathSync(path);
  } catch {
    return resolve(path);
  }
}

/** The nearest ancestor of `dir` that exists (dir itself when it does). */
function _existingAncestor(dir: string): { path: string; info: Deno.FileInfo } {
  let p = resolve(dir);
  for (;;) {
    const info = _stat(p);
    if (info) return { path: p, info };
    const up = dirname(p);
    if (up === p) throw new InputError(`${dir}: no existing parent directory`);
    p = up;
  }
}

/**
 * Checks that files can be created in `dir`, without leaving anything behind: it is a directory
 * (or its nearest existing ancestor is one, where it will be created) in which a file can be
 * created (probed with an empty file, removed at once). InputError of one line naming `what`
 * (default the directory) otherwise.
 */
export function checkOutputDir(dir: string, what = dir): void {
  const info = _stat(dir);
  if (info && !info.isDirectory) throw new InputError(`${what}: ${dir} is not a directory`);
  _probe(_existingAncestor(dir), what);
}

/** Creates and removes an empty file in `anc` (a directory); InputError naming `what`. */
function _probe(anc: { path: string; info: Deno.FileInfo }, what: string): void {
  if (!anc.info.isDirectory) throw new InputError(`${what}: ${anc.path} is not a directory`);
  const probe = `${anc.path}/.lce-probe-${Deno.pid}-${_probes++}`;
  try {
    Deno.writeFileSync(probe, new Uint8Array(), { createNew: true });
  } catch (e) {
    throw new InputError(
      `${what}: cannot write in ${anc.path}: ${(e as Error).message.split("\n")[0]}`,
    );
  } finally {
    try {
      Deno.removeSync(probe);
    } catch {
      // not created
    }
  }
}

let _probes = 0;

/**
 * Checks that every path of `outputs` can be written, without writing anything that stays: its
 * directory exists as a directory (or its nearest existing ancestor is one, where it will be
 * created) in which a file can be created (probed with a temporary file, removed at once), the
 * path itself is not a directory or special file, no two outputs are the same file, and none is
 * one of `inputs`. InputError of one line naming the path otherwise.
 */
export function checkOutputs(outputs: readonly string[], inputs: readonly string[] = []): void {
  const ins = new Set(inputs.map(_real));
  const seen = new Set<string>();
  const probed = new Set<string>();
  for (const out of outputs) {
    const real = _real(out);
    if (ins.has(real)) throw new InputError(`${out}: output is the same file as an input`);
    if (seen.has(real)) throw new InputError(`${out}: named twice as an output`);
    seen.add(real);
    const info = _stat(out);
    if (info && info.isDirectory) throw new InputError(`${out}: output path is a directory`);
    if (info && !info.isFile) throw new InputError(`${out}: output path is not a regular file`);
    const anc = _existingAncestor(dirname(resolve(out)));
    if (probed.has(anc.path)) continue;
    probed.add(anc.path);
    _probe(anc, out);
  }
}

/** One output file. */
export interface OutputFile {
  path: string;
  bytes: Uint8Array | string;
}

/**
 * Writes every file, all or nothing: each to `<path>.tmp-<pid>` (directories created as
 * needed), then, once all are written, each existing target is kept as a hard-linked backup and
 * the temporary files are renamed over the targets. If a write or a rename fails, the renamed
 * targets are restored from their backups (or removed when they did not exist), the temporary
 * files are removed, and an InputError naming the path is thrown.
 */
export async function writeAllOrNothing(files: readonly OutputFile[]): Promise<void> {
  const tag = `.tmp-${Deno.pid}`;
  const temps: string[] = [];
  const backups = new Map<string, string>();
  const renamed: string[] = [];
  let current = "";
  try {
    for (const f of files) {
      current = f.path;
      await Deno.mkdir(dirname(resolve(f.path)), { recursive: true });
      const tmp = f.path + tag;
      temps.push(tmp);
      if (typeof f.bytes === "string") await Deno.writeTextFile(tmp, f.bytes);
      else await Deno.writeFile(tmp, f.bytes);
    }
    for (const f of files) {
      current = f.path;
      const info = _stat(f.path);
      if (info?.isFile) {
        const bak = `${f.path}.bak${tag}`;
        await Deno.remove(bak).catch(() => {});
        await Deno.link(f.path, bak);
        backups.set(f.path, bak);
      }
    }
    for (const f of files) {
      current = f.path;
      await Deno.rename(f.path + tag, f.path);
      renamed.push(f.path);
    }
  } catch (e) {
    for (const p of renamed.reverse()) {
      const bak = backups.get(p);
      if (bak) await Deno.rename(bak, p).catch(() => {});
      else await Deno.remove(p).catch(() => {});
    }
    throw new InputError(`${current}: cannot write: ${(e as Error).message.split("\n")[0]}`);
  } finally {
    for (const t of temps) await Deno.remove(t).catch(() => {});
    for (const b of backups.values()) await Deno.remove(b).catch(() => {});
  }
}

/**
 * Writes `text` to `path` through a temporary file in the same directory renamed over it (the
 * directory is created if missing): a reader sees the old file or the new one, never a part.
 */
export function writeAtomic(path: string, text: string): void {
  mkdirSync(dirname(path) || ".", { recursive: true });
  const tmp = `${path}.tmp-${Deno.pid}`;
  try {
    writeFileSync(tmp, text);
    renameSync(tmp, path);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
}
