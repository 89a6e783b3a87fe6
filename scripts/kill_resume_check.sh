#!/usr/bin/env bash
# A check for a GPU host: table3 at the paper's shape (8192 × 256,000 × 2304, bf16) killed with
# SIGKILL twice — once while it measures, once while a resume makes its inputs — and finished
# with --resume ends with the same set of complete cells as an uninterrupted run, every cell
# measured once across the interrupted runs, the report on disk never holding fewer cells than
# before the resume, the same peak bytes as the uninterrupted run (allocation is deterministic),
# and no cell's peak above the estimate it was admitted by.
#
# A subset keeps it short (about 2–3 minutes on an H100, most of it making the paper-shape inputs
# four times): --methods fused,baseline --modes fwd,bwd --betas 0.1 (4 cells); other flags may be
# given as arguments and replace nothing but add to these (e.g. --reps 3).
#
#   source .gpu/setup.sh; bash scripts/kill_resume_check.sh        # on the GPU host
#
# Writes its runs' reports and logs under $OUT (default out/kill_resume) and prints one line per
# check; exits 0 when every check holds, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/kill_resume}"
args=(--methods fused,baseline --modes fwd,bwd --betas 0.1 "$@")
table3=(./dev run -A scripts/table3.ts)
rm -rf "$out/whole" "$out/killed"
mkdir -p "$out/whole" "$out/killed"

# waits until `file` has `n` lines matching `re` (or the process `pid` has ended)
wait_for() {
  local file=$1 re=$2 n=$3 pid=$4
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$(grep -cE "$re" "$file" 2>/dev/null || true)" -ge "$n" ]; then return 0; fi
    sleep 0.1
  done
  return 1
}

echo "kill_resume_check: uninterrupted run" >&2
"${table3[@]}" "${args[@]}" --out "$out/whole" >/dev/null 2>"$out/whole.log"

echo "kill_resume_check: run 1, killed while measuring its second cell" >&2
"${table3[@]}" "${args[@]}" --out "$out/killed" >/dev/null 2>"$out/run1.log" &
pid=$!
wait_for "$out/run1.log" '^table3: \[[0-9]+/[0-9]+\]' 1 "$pid" || true
sleep 0.3
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
json=$(ls "$out"/killed/table3_*.json)
cp "$json" "$out/after_run1.json"

echo "kill_resume_check: run 2, a resume killed while it makes its inputs" >&2
"${table3[@]}" --resume "$json" >/dev/null 2>"$out/run2.log" &
pid=$!
wait_for "$out/run2.log" 'resuming' 1 "$pid" || true
sleep 1
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
cp "$json" "$out/after_run2.json"

echo "kill_resume_check: run 3, resumed to the end" >&2
"${table3[@]}" --resume "$json" >/dev/null 2>"$out/run3.log" || true

python3 - "$out" "$json" "$(ls "$out"/whole/table3_*.json)" <<'EOF'
import json, re, sys
out, final_path, whole_path = sys.argv[1:4]
load = lambda p: json.load(open(p))
whole, final = load(whole_path), load(final_path)
r1, r2 = load(f"{out}/after_run1.json"), load(f"{out}/after_run2.json")
key = lambda r: (r["method"], r["beta"], r["mode"])
ok = True
def check(cond, what):
    global ok
    ok = ok and cond
    print(f"{'ok  ' if cond else 'FAIL'} {what}")
done = lambda rep: {key(r) for r in rep["rows"] if r.get("error") is None}
check(whole["complete"] and len(done(whole)) == len(whole["rows"]) > 0,
      f"uninterrupted run complete, {len(whole['rows'])} cells without error")
check(final["complete"], "resumed report complete")
check(done(final) == done(whole), "the same set of complete cells as the uninterrupted run")
check(len(r1["rows"]) >= 1 and not r1["complete"], f"killed run kept {len(r1['rows'])} cells")
check(len(r2["rows"]) >= len(r1["rows"]),
      f"killed resume kept {len(r2['rows'])} cells (≥ {len(r1['rows'])} before it)")
cell = re.compile(r"^table3: \[\d+/\d+\] (\S+) β=(\S+) (\S+):", re.M)
measured = [m for i in (1, 2, 3) for m in cell.findall(open(f"{out}/run{i}.log").read())]
dups = sorted({m for m in measured if measured.count(m) > 1})
check(not dups, f"every cell measured once across the interrupted runs ({len(measured)} lines)"
      + (f"; twice: {dups}" if dups else ""))
peaks = lambda rep: {key(r): r["peakBytes"] for r in rep["rows"]}
check(peaks(final) == peaks(whole), "the same peak bytes as the uninterrupted run")
over = [(key(r), r["peakBytes"], r.get("estimateBytes")) for rep in (whole, final)
        for r in rep["rows"] if r.get("estimateBytes") is not None and r["peakBytes"] is not None
        and r["peakBytes"] > r["estimateBytes"]]
check(not over, "no cell's peak above its estimate" + (f": {over}" if over else ""))
sys.exit(0 if ok else 1)
EOF
