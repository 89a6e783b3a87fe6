/**
 * The harness's version, written into every history row (measure/history.ts) and report: raise
 * it when what a figure means changes (what a mode times, how memory is counted, what the
 * correctness check compares), so that a history never joins figures that mean different things.
 * @module
 */

/** Major.minor.patch of the measuring harness. */
export const HARNESS_VERSION = "1.0.0";
