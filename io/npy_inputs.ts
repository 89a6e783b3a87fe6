/**
 * The user's own inputs from `.npy` files: E (n×d), C (v×d) and the targets (n), read bounded
 * (io/npy.ts) and checked against each other, E and C rounded to the compute dtype (a value that
 * is not finite or overflows it is named by tensor, row and column).
 * @module
 */
import { check } from "../core/errors.ts";
import { roundInput } from "../core/dtype.ts";
import type { Dtype, HostInputs } from "../core/options.ts";
import { readNpy, type ReadNpyOptions, toFloat32, toInt32Targets } from "./npy.ts";

/** The three input files. */
export interface InputFiles {
  e: string;
  c: string;
  targets: string;
}

/**
 * Reads E, C and the targets (regular files whose headers declare no more data than they hold
 * and than this machine's memory; rows no longer than `maxRowBytes` when given) and rounds E and
 * C to `dtype`. InputError naming the file or the mismatch otherwise.
 */
export async function readInputFiles(
  f: InputFiles,
  dtype: Dtype,
  o: { maxRowBytes?: number } = {},
): Promise<HostInputs> {
  const limits: ReadNpyOptions = {
    maxRowBytes: o.maxRowBytes,
    boundItemBytes: 4,
    maxBytes: Deno.systemMemoryInfo().total,
    maxBytesWhat: "bytes of this machine's memory",
  };
  const eNpy = await readNpy(f.e, limits), cNpy = await readNpy(f.c, limits);
  const tNpy = await readNpy(f.targets, limits);
  check(eNpy.shape.length === 2, `${f.e}: E must be 2-D (n×d), got shape (${eNpy.shape})`);
  check(cNpy.shape.length === 2, `${f.c}: C must be 2-D (v×d), got shape (${cNpy.shape})`);
  check(
    tNpy.shape.length === 1,
    `${f.targets}: targets must be 1-D (n), got shape (${tNpy.shape})`,
  );
  const [n, d] = eNpy.shape, [v, dc] = cNpy.shape;
  check(dc === d, `hidden sizes differ: E is ${n}×${d}, C is ${v}×${dc}`);
  check(tNpy.shape[0] === n, `targets has ${tNpy.shape[0]} entries, E has ${n} rows`);
  return {
    n,
    v,
    d,
    e: roundInput(toFloat32(eNpy, f.e), dtype, { tensor: "E", cols: d }),
    c: roundInput(toFloat32(cNpy, f.c), dtype, { tensor: "C", cols: d }),
    targets: toInt32Targets(tNpy, f.targets),
  };
}
