"""Session 12: the compiled code of one kernel from an NVIDIA shader-cache .bin: the zstd frames
inside it are decompressed (the zstd command), the largest holds the kernel's ucode; its code
starts at the first S2R (opcode 0x919) on the 16-byte grid of the FFMAs (0x223) and ends after the
last EXIT (0x94d) but for the trailing branch. Writes the raw code for `nvdisasm -b SM90`."""
import os, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read()
m = b'\x28\xb5\x2f\xfd'
offs = []
i = b.find(m)
while i >= 0:
    offs.append(i); i = b.find(m, i + 1)
best = b''
for o in offs:
    r = subprocess.run([os.environ.get("ZSTD", "zstd"), "-d", "-q", "-c"], input=b[o:], capture_output=True)
    if len(r.stdout) > len(best): best = r.stdout
op = lambda i: (best[i] | (best[i + 1] << 8)) & 0xfff
al = max(range(16), key=lambda a: sum(1 for i in range(a, len(best) - 16, 16) if op(i) == 0x223))
ff = [i for i in range(al, len(best) - 16, 16) if op(i) == 0x223]
start = next(i for i in range(al, ff[0], 16) if op(i) == 0x919)
exits = [i for i in range(ff[0], len(best) - 16, 16) if op(i) == 0x94d]
# last EXIT of the cluster that follows the FFMAs (gaps under 64 KiB)
end = ff[-1]
for e in exits:
    if e - end < 65536: end = e
end += 32
open(dst, 'wb').write(best[start:end])
print(f"{src}: ucode {len(best)} bytes, grid {al}, code [{start}, {end}) = {(end - start) // 16} instructions, FFMA {len(ff)}")
