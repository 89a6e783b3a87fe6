"""Session 12: find the SASS inside one NVIDIA shader-cache .bin (16-byte instructions whose low
12 bits are the opcode; FFMA = 0x223) and disassemble it with nvdisasm's raw mode."""
import struct, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read()
best = None
for al in range(16):
    n = sum(1 for i in range(al, len(b) - 16, 16) if (b[i] | (b[i + 1] << 8)) & 0xfff == 0x223)
    if best is None or n > best[1]:
        best = (al, n)
al, n = best
hits = [i for i in range(al, len(b) - 16, 16) if (b[i] | (b[i + 1] << 8)) & 0xfff == 0x223]
print(f"{src}: {len(b)} bytes, alignment {al}, FFMA-like words {n}, first {hits[0] if hits else None}, last {hits[-1] if hits else None}")
def dis(lo, hi, tag):
    lo = max(al, lo - (lo - al) % 16); hi = min(len(b), hi)
    hi -= (hi - lo) % 16
    open('/tmp/raw.bin', 'wb').write(b[lo:hi])
    r = subprocess.run(["nvdisasm", "-b", "SM90", "/tmp/raw.bin"], capture_output=True, text=True)
    print(f"  {tag} [{lo}, {hi}): rc {r.returncode}, {len(r.stdout.splitlines())} lines; stderr {r.stderr[:200]!r}")
    return r
if hits:
    r = dis(al, len(b), "whole")
    if r.returncode != 0 or len(r.stdout.splitlines()) < 100:
        r = dis(hits[0] - 8192, hits[-1] + 8192, "window")
    open(dst, 'w').write(r.stdout)
    t = r.stdout
    for op in ["FFMA", "LDS", "STS", "BAR", "LDG", "BRA", "EXIT", "STL", "LDL", "IMNMX", "VIMNMX", "PRMT", "SHF", "LOP3", "IADD3", "IMAD", "MOV", "NOP", ".reuse"]:
        print(f"    {op}: {t.count(op)}")
