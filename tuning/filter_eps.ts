/**
 * `deno run -A tuning/filter_eps.ts [fixture n v d β]`: in float64 on the CPU, how the gradient
 * filter's ε trades kept 128×64 tiles against the dC mass it drops (of max |dC|, over all rows and
 * over 32 sampled rows), for ε = 2^-12 … 2^-20. docs/performance.md ("Where many tiles are kept").
 * @module
 */
import { makeFixture } from "../fixtures/mod.ts";
const [fixture, N, V, D, beta] = [
  Deno.args[0] ?? "llm",
  +(Deno.args[1] ?? 4096),
  +(Deno.args[2] ?? 24576),
  +(Deno.args[3] ?? 128),
  +(Deno.args[4] ?? 0.1),
];
const TT = 128, VT = 64;
const EPS = [2 ** -12, 2 ** -14, 2 ** -16, 2 ** -18, 2 ** -20];
const x = makeFixture(fixture, { n: N, v: V, d: D, dtype: "bf16", seed: 0 });
const E = Float64Array.from(x.e), C = Float64Array.from(x.c), t = x.targets;
const dC = new Float64Array(V * D);
const bucket = EPS.map(() => new Float64Array(V * D));
const tilesV = Math.ceil(V / VT);
const kept = EPS.map(() => 0);
let tiles = 0;
const z = new Float64Array(TT * V);
const t0 = performance.now();
for (let n0 = 0; n0 < N; n0 += TT) {
  const rows = Math.min(TT, N - n0);
  for (let r = 0; r < rows; r++) {
    const eo = (n0 + r) * D;
    for (let v = 0; v < V; v++) {
      const co = v * D;
      let s = 0;
      for (let k = 0; k < D; k++) s += E[eo + k] * C[co + k];
      z[r * V + v] = s;
    }
    let m = -Infinity;
    for (let v = 0; v < V; v++) m = Math.max(m, z[r * V + v]);
    let se = 0;
    for (let v = 0; v < V; v++) se += Math.exp(z[r * V + v] - m);
    for (let v = 0; v < V; v++) z[r * V + v] = Math.exp(z[r * V + v] - m) / se; // p
  }
  for (let tv = 0; tv < tilesV; tv++) {
    const v0 = tv * VT, v1 = Math.min(V, v0 + VT);
    let mp = 0;
    for (let r = 0; r < rows; r++) for (let v = v0; v < v1; v++) mp = Math.max(mp, z[r * V + v]);
    tiles++;
    let L = 0;
    for (let i = 0; i < EPS.length; i++) {
      if (mp < EPS[i]) L = i + 1;
      else kept[i]++;
    }
    for (let r = 0; r < rows; r++) {
      const n = n0 + r, eo = n * D;
      if (t[n] < 0) continue;
      for (let v = v0; v < v1; v++) {
        const p = z[r * V + v];
        const g = p - (v === t[n] ? 1 - beta : 0) - beta / V;
        const co = v * D;
        for (let k = 0; k < D; k++) dC[co + k] += g * E[eo + k];
        if (L > 0) {
          const b = bucket[L - 1];
          for (let k = 0; k < D; k++) b[co + k] += p * E[eo + k];
        }
      }
    }
  }
}
const rowMax = (a: Float64Array, v: number) => {
  let m = 0;
  for (let k = 0; k < D; k++) m = Math.max(m, Math.abs(a[v * D + k]));
  return m;
};
// dropped at ε_i = Σ_{j ≥ i} bucket[j]
const dropped = EPS.map(() => new Float64Array(V * D));
for (let i = EPS.length - 1; i >= 0; i--) {
  for (let j = 0; j < V * D; j++) {
    dropped[i][j] = bucket[i][j] + (i + 1 < EPS.length ? dropped[i + 1][j] : 0);
  }
}
let seed = 12345;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const samples = Array.from({ length: 32 }, () => Math.floor(rnd() * V));
const wantAll = Math.max(...Array.from({ length: V }, (_, v) => rowMax(dC, v)));
const wantS = Math.max(...samples.map((v) => rowMax(dC, v)));
console.log(
  `${fixture} ${N}×${V}×${D} β=${beta}, tile ${TT}×${VT}, ${tiles} tiles, ${
    ((performance.now() - t0) / 1000).toFixed(0)
  } s`,
);
console.log("eps | kept tiles | dC err (all rows, of max |dC|) | dC err (32 sampled rows)");
EPS.forEach((e, i) => {
  const errAll = Math.max(...Array.from({ length: V }, (_, v) => rowMax(dropped[i], v))) / wantAll;
  const errS = Math.max(...samples.map((v) => rowMax(dropped[i], v))) / wantS;
  console.log(
    `2^${Math.log2(e)} | ${(100 * kept[i] / tiles).toFixed(1)}% | ${errAll.toExponential(2)} | ${
      errS.toExponential(2)
    }`,
  );
});
