"""Session 12: statistics of one disassembled kernel's main loop (nvdisasm output): FFMAs whose
register-file operands (those not served by the previous instruction's .reuse) fall in one bank
(bank = register % 2), the distance in instructions from each LDS to the first FFMA that reads
its result, the highest register and the loop's length. Prints one line: NAME conflicts conflicts3
ldsmin ldsmedian maxreg loop_instructions."""
import re, sys
name, path = sys.argv[1], sys.argv[2]
L = [l for l in open(path) if re.match(r"\s*/\*[0-9a-f]+\*/", l)]
ins = []
for l in L:
    m = re.match(r"\s*/\*([0-9a-f]+)\*/\s*(?:@!?U?P\w+\s+)?([A-Z0-9_]+)(\S*)\s*(.*?);", l)
    if m: ins.append((int(m.group(1), 16), m.group(2), m.group(4)))
best = None
for a, op, args in ins:
    if op == "BRA":
        t = re.search(r"0x([0-9a-f]+)", args)
        if t and int(t.group(1), 16) < a and (best is None or a - int(t.group(1), 16) > best[1] - best[0]):
            best = (int(t.group(1), 16), a)
lo, hi = best
body = [x for x in ins if lo <= x[0] <= hi]
prev = set(); conf = conf3 = 0; lds = {}; dist = []
for i, (a, op, args) in enumerate(body):
    if op == "LDS":
        r = int(re.match(r"R(\d+)", args).group(1))
        for q in range(r, r + 4): lds[q] = i
    if op != "FFMA":
        prev = set(); continue
    ops = [o.strip() for o in args.split(",")]
    reads = []; cur = set()
    for slot, o in enumerate(ops[1:]):
        r = int(re.match(r"R(\d+)", o).group(1))
        if (slot, r) not in prev: reads.append(r)
        if o.endswith(".reuse"): cur.add((slot, r))
        if r in lds: dist.append(i - lds.pop(r))
    prev = cur
    c = max([sum(1 for r in reads if r % 2 == b) for b in (0, 1)])
    conf += c >= 2; conf3 += c >= 3
dist.sort()
regs = max(int(r) for r in re.findall(r"\bR(\d+)\b", "".join(L)))
print(name, conf, conf3, dist[0], dist[len(dist) // 2], regs, len(body))
