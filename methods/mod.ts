/**
 * The registry of Table 3 rows: every method by its command-line name, in the paper's row order.
 * @module
 */
import { InputError } from "../core/errors.ts";
import { parseList } from "../core/cli.ts";
import type { LceMethod } from "./types.ts";
import { baseline } from "./baseline.ts";
import { chunked } from "./chunked.ts";
import { liger } from "./liger.ts";
import { compiled } from "./compiled.ts";
import {
  fused,
  fusedF32Grad,
  fusedFb,
  fusedFbNoFilter,
  fusedNoFilter,
  fusedNoSort,
  fusedTileMap,
} from "./fused.ts";
import { baselineTc } from "./baseline_tc.ts";
import { fusedTc, fusedTileMapTc } from "./fused_tc.ts";

export type { LceMethod, PreparedMethod, ProblemSpec } from "./types.ts";

/** Every method, in the paper's row order. */
export const METHODS: readonly LceMethod[] = [
  baseline,
  chunked,
  liger,
  compiled,
  fused,
  fusedNoSort,
  fusedNoFilter,
  fusedFb,
  fusedFbNoFilter,
  fusedF32Grad,
  fusedTileMap,
  baselineTc,
  fusedTc,
  fusedTileMapTc,
];

/**
 * The method called `name` among `from` (default {@link METHODS}; commands add those of
 * `--method-module`); InputError naming the known ones otherwise.
 */
export function methodByName(name: string, from: readonly LceMethod[] = METHODS): LceMethod {
  const m = from.find((m) => m.name === name);
  if (!m) {
    throw new InputError(
      `unknown method '${name}' (expected one of: ${from.map((m) => m.name).join(", ")})`,
    );
  }
  return m;
}

/**
 * The methods of a `--methods a,b` list among `from` (InputError naming an unknown one), or all
 * of them.
 */
export function parseMethods(
  list: string | undefined,
  from: readonly LceMethod[] = METHODS,
): LceMethod[] {
  return list === undefined
    ? [...from]
    : parseList("--methods", list).map((name) => methodByName(name, from));
}
