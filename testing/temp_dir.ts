/**
 * A temporary directory for a test, removed with everything in it when the test process ends
 * (its `unload` event), whether the test passed or not, so test runs leave nothing in the
 * system's temporary directory.
 * @module
 */

/** Creates a temporary directory (name starting with `prefix`) that the process removes at exit. */
export async function tempDir(prefix: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch (e) {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    }
  });
  return dir;
}
