"""Session 12: look for the NVIDIA Vulkan driver's compiled code in its shader disk cache.
Lists the cache, then carves every ELF image found in it and asks nvdisasm / cuobjdump for it."""
import os, subprocess, sys
root = sys.argv[1]; out = sys.argv[2]
os.makedirs(out, exist_ok=True)
found = 0
for dp, _, fs in os.walk(root):
    for f in fs:
        p = os.path.join(dp, f)
        b = open(p, 'rb').read()
        print(f"{p} {len(b)} bytes, head {b[:16].hex()}")
        i = b.find(b"\x7fELF")
        while i >= 0 and found < 40:
            found += 1
            e = os.path.join(out, f"elf{found}.bin")
            open(e, 'wb').write(b[i:])
            print(f"  ELF at {i}")
            for cmd in (["cuobjdump", "-sass", e], ["nvdisasm", "-c", e]):
                r = subprocess.run(cmd, capture_output=True, text=True)
                txt = r.stdout + r.stderr
                name = os.path.join(out, f"elf{found}.{cmd[0]}.txt")
                open(name, 'w').write(txt)
                lines = txt.splitlines()
                print(f"  {cmd[0]}: rc {r.returncode}, {len(lines)} lines, FFMA {txt.count('FFMA')}, LDS {txt.count('LDS')}, STS {txt.count('STS')}, BAR {txt.count('BAR')}; first: {lines[:3]}")
            i = b.find(b"\x7fELF", i + 4)
print("ELF images:", found)
