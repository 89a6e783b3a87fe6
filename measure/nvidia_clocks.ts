/**
 * The GPU's SM clock while something runs, from `nvidia-smi -lms 50` in the background: an idle
 * NVIDIA GPU lowers its clock, and a measurement made at a lowered clock shows it here.
 * @module
 */

/**
 * Starts sampling the SM clock every 50 ms; `stop()` ends it and returns the samples as
 * [performance.now() ms, MHz]. Without `nvidia-smi` (no NVIDIA GPU) there are none.
 */
export function sampleSmClocks(): { stop(): Promise<[number, number][]> } {
  const samples: [number, number][] = [];
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-lms", "50"],
      stdout: "piped",
      stderr: "null",
    }).spawn();
  } catch {
    return { stop: () => Promise.resolve(samples) };
  }
  const reading = (async () => {
    let rest = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      const lines = (rest + chunk).split("\n");
      rest = lines.pop()!;
      for (const l of lines) if (/^\d+/.test(l.trim())) samples.push([performance.now(), +l]);
    }
  })().catch(() => {});
  return {
    async stop() {
      try {
        child.kill();
      } catch {
        // already gone
      }
      await child.status;
      await reading;
      return samples;
    },
  };
}
