/**
 * Where a report's numbers come from in the source: the git commit of the working tree and
 * whether it had uncommitted changes when the report was measured; and the rule that a report
 * written into the committed reports folder comes from a clean tree.
 * @module
 */
import { basename, dirname, join, resolve } from "node:path";
import { InputError } from "../core/errors.ts";

/** The git state of the tree a report was measured with. */
export interface GitInfo {
  /** `git rev-parse HEAD`, or null outside a git checkout (e.g. a copied bundle). */
  commit: string | null;
  /**
   * Whether tracked files differed from the commit (`git status --porcelain
   * --untracked-files=no` not empty), or null when unknown.
   */
  dirty: boolean | null;
}

async function _git(args: string[], cwd: string): Promise<string | null> {
  try {
    const out = await new Deno.Command("git", {
      args,
      cwd,
      stdout: "piped",
      stderr: "null",
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout) : null;
  } catch {
    return null;
  }
}

/**
 * The commit and dirty state of the checkout holding this file (so it does not depend on the
 * current directory); nulls where git or the repository is missing.
 */
export async function gitInfo(
  dir: string = new URL("..", import.meta.url).pathname,
): Promise<GitInfo> {
  const head = await _git(["rev-parse", "HEAD"], dir);
  const commit = head?.trim().match(/^[0-9a-f]{40}$/) ? head.trim() : null;
  if (commit === null) return { commit: null, dirty: null };
  const status = await _git(["status", "--porcelain", "--untracked-files=no"], dir);
  return { commit, dirty: status === null ? null : status.trim() !== "" };
}

/** The repository's folder of committed reports (those a user reads, made from a clean tree). */
export const COMMITTED_REPORTS = resolve(new URL("../reports", import.meta.url).pathname);

/** `dir` with symbolic links resolved as far as it exists. */
function _real(dir: string): string {
  let p = resolve(dir);
  const rest: string[] = [];
  for (;;) {
    try {
      return join(Deno.realPathSync(p), ...rest.reverse());
    } catch {
      const up = dirname(p);
      if (up === p) return resolve(dir);
      rest.push(basename(p));
      p = up;
    }
  }
}

/** Whether `dir` is the committed reports folder or a folder inside it. */
export function isCommittedReportsDir(dir: string): boolean {
  const d = _real(dir), r = _real(COMMITTED_REPORTS);
  return d === r || d.startsWith(r + "/");
}

/**
 * Refuses to write a report into the committed reports folder from a tree with uncommitted
 * changes (InputError, before anything is measured), unless `allowDirty`: then the report is
 * written and its Source line says "dirty tree". A committed report comes from a clean tree, at
 * the commit it names.
 */
export async function checkReportSource(
  dir: string,
  o: { allowDirty: boolean; flag?: string; git?: GitInfo },
): Promise<void> {
  if (o.allowDirty || !isCommittedReportsDir(dir)) return;
  const git = o.git ?? await gitInfo();
  if (git.dirty !== true) return;
  throw new InputError(
    `${o.flag ?? "--out"} ${dir}: the tree has uncommitted changes, and a report in reports/ ` +
      "comes from a clean tree; commit first, write elsewhere (the default out/), or give " +
      "--allow-dirty to write it marked dirty",
  );
}
