"""Same-card rows of PyTorch and of the seeds' own systems for the Table 3 report.

`scripts/torch_peers.py` is the command. Its parent process (cli.py) imports no torch: it parses
and checks the arguments, finds each system's package, starts one worker process per system
(worker.py: the two cut_cross_entropy packages share an import name, and a kernel that hangs or
corrupts its CUDA context takes only its own rows down), and writes the JSON that
`deno task table3 --external FILE` merges.
"""
