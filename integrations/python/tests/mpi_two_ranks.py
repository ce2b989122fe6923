"""Run by test_mpi.py under `mpiexec -n 2`: one Python process per rank trains the tiny GPT at
ZeRO stage 2 over both ranks with a callback (the ranks must see the same global losses), then each
rank builds its own OffloadAdamW. Exits non-zero on any mismatch. Each rank writes its result to
rank<r>.json in TZ_RESULT_DIR: the ranks' stdout lines can interleave under mpiexec."""
import json
import os
import sys

import tierzero
from conftest import TINY

config = json.loads(json.dumps(TINY))
config["zero_optimization"] = {"stage": 2}
seen = []
result = tierzero.train(config, seen.append, quiet=True)
rank = result["rank"]
assert [m["step"] for m in seen] == [1, 2, 3, 4], seen
out = {"rank": rank, "losses": [m["loss"] for m in seen]}
try:
    import torch
    from tierzero.torch import OffloadAdamW
    model = torch.nn.Linear(8, 4)
    opt = OffloadAdamW(model.parameters(), lr=1e-2, host_budget=16 << 20)
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    out["offload_steps"] = opt.steps_taken
except ImportError:
    out["offload_steps"] = None
with open(os.path.join(os.environ["TZ_RESULT_DIR"], f"rank{rank}.json"), "w") as f:
    json.dump(out, f)
sys.exit(0)
