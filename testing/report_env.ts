/**
 * The environment of a report for report tests: an NVIDIA card on Deno's wgpu, its description,
 * features, OS, driver and commit as a test needs them.
 * @module
 */
import type { Table3Env } from "../report/table3.ts";

/** A Table 3 (and sweep) environment; everything not given is a fixed hardware adapter's. */
export function testReportEnv(o: {
  description: string;
  driver: { version: string; name: string };
  features?: string[];
  os?: string;
  git?: Table3Env["git"];
}): Table3Env {
  return {
    adapter: {
      engine: "deno",
      engineVersion: "wgpu (Deno 2.9.6)",
      description: o.description,
      vendor: "nvidia",
      architecture: "hopper",
      device: "",
      isFallbackAdapter: false,
      features: o.features ?? [],
      limits: {},
      maxBindingBytes: 2 ** 31,
      subgroupMatrixConfigs: [],
    },
    deno: { deno: "2.9.6", v8: "x", typescript: "y" },
    os: o.os ?? "linux",
    date: "2026-01-01T00:00:00.000Z",
    driver: o.driver,
    ...(o.git ? { git: o.git } : {}),
  };
}
