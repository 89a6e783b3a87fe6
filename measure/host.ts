/**
 * What a measurement ran on besides the adapter: the host's CPU model, the GPU driver and its
 * version (NVIDIA's from nvidia-smi; Mesa's — lavapipe, the software adapter of CI — from the
 * adapter's description where the engine puts it there, as Dawn does, else from the Vulkan
 * driver library the loader's manifest names), and the host's free memory.
 * @module
 */
import { dirname, isAbsolute, join } from "node:path";
import type { AdapterReport, GpuContext } from "../gpu/context.ts";
import { slug } from "../core/slug.ts";

/** A file-name slug of an adapter: its description (or vendor, architecture, device). */
export function adapterSlug(a: AdapterReport): string {
  const name = a.description && a.description !== "(no description)"
    ? a.description
    : [a.vendor, a.architecture, a.device].filter((s) => s).join(" ");
  return slug(name, "adapter");
}

/** The first `model name` of a /proc/cpuinfo text, trimmed, or undefined. */
export function cpuModel(cpuinfo: string): string | undefined {
  const m = cpuinfo.match(/^model name\s*:\s*(.+)$/m);
  return m ? m[1].trim() : undefined;
}

/** This host's CPU model from /proc/cpuinfo, or undefined where there is none. */
export async function hostCpuModel(): Promise<string | undefined> {
  try {
    return cpuModel(await Deno.readTextFile("/proc/cpuinfo"));
  } catch {
    return undefined;
  }
}

/** Driver version and GPU name from `nvidia-smi`, or null when the command is missing or fails. */
export async function nvidiaDriver(): Promise<{ version: string; name: string } | null> {
  try {
    const out = await new Deno.Command("nvidia-smi", {
      args: ["--query-gpu=driver_version,name", "--format=csv,noheader"],
      stdout: "piped",
      stderr: "null",
    }).output();
    if (!out.success) return null;
    const line = new TextDecoder().decode(out.stdout).split("\n")[0].trim();
    const comma = line.indexOf(",");
    if (comma < 0) return null;
    return { version: line.slice(0, comma).trim(), name: line.slice(comma + 1).trim() };
  } catch {
    return null;
  }
}

/** `Mesa 25.0.7-2~bpo12+1` from a text that names a Mesa version, or undefined. */
export function mesaVersionIn(text: string): string | undefined {
  const m = /Mesa (\d+\.\d+(?:\.\d+)?(?:-[\w.~+]+)?)/.exec(text);
  return m ? `Mesa ${m[1]}` : undefined;
}

/** Where the Vulkan loader looks for driver manifests (besides VK_DRIVER_FILES/VK_ICD_FILENAMES). */
const _ICD_DIRS = ["/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/usr/share/vulkan/icd.d"];
/** Where a manifest's bare library name is found. */
const _LIB_DIRS = [
  "/usr/lib/x86_64-linux-gnu",
  "/usr/lib/aarch64-linux-gnu",
  "/usr/lib64",
  "/usr/lib",
  "/usr/local/lib",
];

function _env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}

/** The lavapipe manifests the loader would read. */
function _lavapipeManifests(): string[] {
  const listed = (_env("VK_DRIVER_FILES") ?? _env("VK_ICD_FILENAMES"))?.split(":")
    .filter((f) => f !== "");
  if (listed && listed.length > 0) return listed.filter((f) => /lvp/.test(f));
  const out: string[] = [];
  for (const dir of _ICD_DIRS) {
    try {
      for (const e of Deno.readDirSync(dir)) {
        if (e.isFile && /^lvp_icd.*\.json$/.test(e.name)) out.push(join(dir, e.name));
      }
    } catch {
      // no such directory
    }
  }
  return out;
}

/** The library a manifest names, as a path (a bare name searched in the usual directories). */
function _libraryOf(manifest: string): string | undefined {
  let lib: unknown;
  try {
    lib = JSON.parse(Deno.readTextFileSync(manifest))?.ICD?.library_path;
  } catch {
    return undefined;
  }
  if (typeof lib !== "string" || lib === "") return undefined;
  if (isAbsolute(lib)) return lib;
  if (lib.includes("/")) return join(dirname(manifest), lib);
  const dirs = [...(_env("LD_LIBRARY_PATH")?.split(":") ?? []), ..._LIB_DIRS];
  for (const d of dirs.filter((x) => x !== "")) {
    try {
      if (Deno.statSync(join(d, lib)).isFile) return join(d, lib);
    } catch {
      // not there
    }
  }
  return undefined;
}

/** The Mesa version of the lavapipe driver the Vulkan loader would load, or undefined. */
export async function lavapipeMesaVersion(): Promise<string | undefined> {
  for (const manifest of _lavapipeManifests()) {
    const lib = _libraryOf(manifest);
    if (!lib) continue;
    try {
      const bytes = await Deno.readFile(lib);
      const v = mesaVersionIn(new TextDecoder("latin1").decode(bytes));
      if (v) return v;
    } catch {
      // unreadable: try the next
    }
  }
  return undefined;
}

/**
 * The driver of a context and its version: `NVIDIA <version>` where nvidia-smi answers on a
 * hardware adapter, `Mesa <version>` for a Mesa driver (the software adapter), else undefined.
 */
export async function driverVersion(ctx: GpuContext): Promise<string | undefined> {
  const r = ctx.report;
  if (!r.isFallbackAdapter) {
    const nv = await nvidiaDriver();
    if (nv) return `NVIDIA ${nv.version}`;
  }
  const inDescription = mesaVersionIn(r.description);
  if (inDescription) return inDescription;
  const mesa = r.isFallbackAdapter || /llvmpipe|lavapipe|mesa/i.test(`${r.description} ${r.vendor}`)
    ? await lavapipeMesaVersion()
    : undefined;
  return mesa;
}

/**
 * Bytes of host memory available to new allocations now (MemAvailable of /proc/meminfo through
 * Deno), or Infinity where the system does not say.
 */
export function freeHostBytes(): number {
  try {
    const m = Deno.systemMemoryInfo();
    return m.available > 0 ? m.available : Infinity;
  } catch {
    return Infinity;
  }
}
