import re, sys, collections
def stat(path):
    L = [l for l in open(path) if re.match(r"\s*/\*[0-9a-f]+\*/", l)]
    ins = []
    for l in L:
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s*(@!?U?P\w+\s+)?([A-Z0-9_]+)(\.[A-Z0-9_.]+)?\s*(.*?);", l)
        if m: ins.append((int(m.group(1), 16), m.group(3), m.group(4) or "", m.group(5)))
    # loop: the backward BRA with the largest span
    best = None
    for a, op, mod, args in ins:
        if op == "BRA":
            t = re.search(r"0x([0-9a-f]+)", args)
            if t and int(t.group(1), 16) < a:
                span = a - int(t.group(1), 16)
                if best is None or span > best[2]: best = (int(t.group(1), 16), a, span)
    lo, hi, _ = best
    body = [x for x in ins if lo <= x[0] <= hi]
    bars = [x[0] for x in body if x[1] == "BAR"]
    regs = max(int(r) for r in re.findall(r"\bR(\d+)\b", "".join(L)))
    print(f"{path}: loop [{lo:#x}, {hi:#x}] {len(body)} instructions, BARs at {[hex(b) for b in bars]}, max register R{regs}")
    cuts = [lo] + bars + [hi + 1]
    for i in range(len(cuts) - 1):
        seg = [x for x in body if cuts[i] <= x[0] < cuts[i + 1]]
        c = collections.Counter(x[1] for x in seg)
        print(f"   segment {i}: {len(seg)} instr; " + ", ".join(f"{k} {v}" for k, v in c.most_common(12)))
for p in sys.argv[1:]: stat(p)
