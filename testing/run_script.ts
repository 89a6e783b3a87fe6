/**
 * The one way tests run a command-line entry point: `deno run --quiet -A <script> ...args` (or
 * other permission flags) as a subprocess, with colour off, either to completion
 * ({@link runScript}) or watched line by line until it has printed enough to be killed
 * ({@link spawnScript}, {@link readUntil}). `--quiet` keeps Deno's own notices (the downloads of
 * a dependency not yet in the cache) out of the script's stderr; the script's own output and
 * uncaught errors still come through.
 * @module
 */

/** How a script run ended and what it printed. */
export interface ScriptRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Options of {@link runScript} and {@link spawnScript}. */
export interface ScriptOptions {
  /** Added to this process's environment (after NO_COLOR=1); a value "" unsets the variable. */
  env?: Record<string, string>;
  /** Trim stderr (for matching a one-line error with `$`). Default false. */
  trimStderr?: boolean;
  /** Working directory of the script (default this process's). */
  cwd?: string;
  /** Permission flags instead of `-A` (e.g. to deny writing somewhere, as a read-only disk). */
  permissions?: string[];
}

/** A script's path, from the repository root (`scripts/lce.ts`) or absolute. */
function _path(script: string): string {
  return script.startsWith("/") ? script : new URL(`../${script}`, import.meta.url).pathname;
}

function _env(o: ScriptOptions): Record<string, string> {
  const env: Record<string, string> = { ...Deno.env.toObject(), NO_COLOR: "1", ...o.env };
  for (const [k, v] of Object.entries(o.env ?? {})) if (v === "") delete env[k];
  return env;
}

/** The `deno run --quiet` of `script`: its arguments, environment and working directory. */
function _denoRun(script: string, args: readonly string[], o: ScriptOptions): Deno.CommandOptions {
  return {
    args: ["run", "--quiet", ...(o.permissions ?? ["-A"]), _path(script), ...args],
    env: _env(o),
    clearEnv: true,
    cwd: o.cwd,
  };
}

/** Runs `script` with `args` to completion; returns its exit code, stdout and stderr. */
export async function runScript(
  script: string,
  args: readonly string[],
  o: ScriptOptions = {},
): Promise<ScriptRun> {
  const out = await new Deno.Command(Deno.execPath(), {
    ..._denoRun(script, args, o),
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  const stderr = dec.decode(out.stderr);
  return {
    code: out.code,
    stdout: dec.decode(out.stdout),
    stderr: o.trimStderr ? stderr.trim() : stderr,
  };
}

/** Starts `script` with `args`, piping only the stream `watch` (the other is discarded). */
export function spawnScript(
  script: string,
  args: readonly string[],
  watch: "stdout" | "stderr",
  o: ScriptOptions = {},
): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    ..._denoRun(script, args, o),
    stdout: watch === "stdout" ? "piped" : "null",
    stderr: watch === "stderr" ? "piped" : "null",
  }).spawn();
}

/**
 * Reads the watched stream of a {@link spawnScript} child until `enough(text so far)` holds or
 * the stream ends, then kills the child with `o.signal` (default SIGKILL), reads on to the end
 * with `o.drain` (what a signalled script prints on its way out), waits for it and returns the
 * text read and the exit status.
 */
export async function readUntil(
  child: Deno.ChildProcess,
  watch: "stdout" | "stderr",
  enough: (text: string) => boolean,
  o: { signal?: Deno.Signal; drain?: boolean } = {},
): Promise<{ text: string; status: Deno.CommandStatus }> {
  const reader = child[watch].getReader();
  const dec = new TextDecoder();
  let text = "";
  while (!enough(text)) {
    const { value, done } = await reader.read();
    if (done) break;
    text += dec.decode(value);
  }
  try {
    child.kill(o.signal ?? "SIGKILL");
  } catch {
    // already exited
  }
  if (o.drain) {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
  } else await reader.cancel();
  return { text, status: await child.status };
}
