import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import {
  checkReportSource,
  COMMITTED_REPORTS,
  gitInfo,
  isCommittedReportsDir,
} from "./provenance.ts";
import { InputError } from "../core/errors.ts";

async function _git(cwd: string, ...args: string[]) {
  const out = await new Deno.Command("git", { args, cwd, stdout: "null", stderr: "piped" })
    .output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
}

Deno.test("gitInfo: commit and dirty state of a repository, nulls outside one", async () => {
  const dir = mkdtempSync(join(tmpdir(), "provenance-"));
  try {
    assert.deepEqual(await gitInfo(dir), { commit: null, dirty: null });
    await _git(dir, "init", "-q");
    writeFileSync(join(dir, "a.txt"), "1");
    await _git(dir, "add", "a.txt");
    await _git(dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one");
    const clean = await gitInfo(dir);
    assert.match(clean.commit!, /^[0-9a-f]{40}$/);
    assert.equal(clean.dirty, false);
    writeFileSync(join(dir, "untracked.txt"), "x");
    assert.equal((await gitInfo(dir)).dirty, false, "untracked files do not count");
    writeFileSync(join(dir, "a.txt"), "2");
    assert.deepEqual(await gitInfo(dir), { commit: clean.commit, dirty: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

Deno.test("checkReportSource: reports/ takes a report from a clean tree, or marked with --allow-dirty", async () => {
  const dirty = { commit: "a".repeat(40), dirty: true };
  const reports = COMMITTED_REPORTS;
  assert.ok(isCommittedReportsDir(reports));
  assert.ok(isCommittedReportsDir(join(reports, "software")));
  assert.ok(!isCommittedReportsDir(join(reports, "..", "out")));
  assert.ok(!isCommittedReportsDir(reports + "-old"));
  await assert.rejects(
    () => checkReportSource(reports, { allowDirty: false, git: dirty }),
    (e: Error) => {
      assert.ok(e instanceof InputError);
      assert.match(
        e.message,
        /^--out .*reports: the tree has uncommitted changes, .*--allow-dirty/,
      );
      return true;
    },
  );
  await checkReportSource(reports, { allowDirty: true, git: dirty });
  await checkReportSource(reports, { allowDirty: false, git: { ...dirty, dirty: false } });
  await checkReportSource(join(reports, "..", "out"), { allowDirty: false, git: dirty });
});
