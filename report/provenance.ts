/**
 * Where a report's numbers come from in the source: the git commit of the working tree and
 * whether it had uncommitted changes when the report was measured.
 * @module
 */

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
