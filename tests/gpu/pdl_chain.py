"""20 chains of three PDL launches without syncs (read after write, write after read), for each
launcher-keyword dict: argv[1] is JSON [[module, p, options], ...]; prints RESULT + JSON
[[options, mismatches], ...]. Run by conftest's ``run_pdl_chain`` in a child process."""

import importlib
import json
import sys

import torch

torch.manual_seed(0)
out = []
for module, p, opts in json.loads(sys.argv[1]):
    launcher = importlib.import_module(module).launcher
    kw = {**{k: tuple(v) if isinstance(v, list) else v for k, v in opts.items()}, "pdl": True}
    # With PDL a launch may start while the previous one still runs. Three launches, no sync:
    # c1 = x @ y.T; d = c1 @ e.T reads c1 (read after write); c1 = x2 @ y.T overwrites c1
    # while the second may still read it (write after read). Small integers: every product
    # is exact (|c1| <= 1024 in fp16, |d| < 2^24 in fp32), so any race shows as a mismatch.
    m, n, k = 4096, 4096, 256
    ints = lambda *s: torch.randint(-2, 2, s, device="cuda").half()
    x, x2, y, e = ints(m, k), ints(m, k), ints(n, k), ints(p, n)
    c1 = torch.empty(m, n, device="cuda", dtype=torch.float16)
    d = torch.empty(m, p, device="cuda", dtype=torch.float32)
    first, second, third = (launcher(x, y, c1, **kw), launcher(c1, e, d, **kw),
                            launcher(x2, y, c1, **kw))
    want_d = (x.float() @ y.float().T) @ e.float().T
    want_c1 = (x2.float() @ y.float().T).half()
    bad = 0
    for _ in range(20):
        first(); second(); third()
        torch.cuda.synchronize()
        bad += int(not torch.equal(d, want_d)) + int(not torch.equal(c1, want_c1))
    out.append([opts, bad])
    print(out[-1], flush=True)
print("RESULT" + json.dumps(out))
