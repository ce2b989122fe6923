"""OffloadAdamW(state="nvme") against DeepSpeed's NVMe optimizer state swapping (ZeRO-Infinity:
the ZeRO-3 engine with offload_optimizer.device "nvme", its optimizer swapper over the async_io
op), same model, same process, the steps interleaved: the time of the optimizer step alone
(DeepSpeed: engine.step() after the backward, which swaps the fp32 master and moments in, runs
its CPU Adam and swaps them out; ours: OffloadAdamW.step() with the same gradients' shapes).

    python integrations/python/bench/bench_offload_nvme_deepspeed.py [--params 16.8e6]
        [--steps 5] [--nvme-path DIR]

DeepSpeed's async_io op needs libaio (Debian: apt-get install libaio-dev) to build; that is for
this peer only: TierZero's NVMe path uses io_uring and does not depend on libaio. On a machine
without a GPU DeepSpeed picks its CPU accelerator and JIT-builds its shm communication op in
deepspeed.initialize (one process; torch.distributed's env:// variables are set here). Prints a
table on stderr and one JSON object (DESIGN.md's bench format) on stdout.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch

from tierzero.torch import OffloadAdamW

HYPER = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
WIDTH = 2048


def model_of(params):
    torch.manual_seed(0)
    layers = max(1, round(params / (WIDTH * WIDTH)))
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(layers)])


def deepspeed_engine(model, nvme_dir):
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29517"), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    import deepspeed
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": HYPER["lr"], "betas": list(HYPER["betas"]),
                                                  "eps": HYPER["eps"],
                                                  "weight_decay": HYPER["weight_decay"]}},
        "zero_optimization": {"stage": 3,
                              "offload_optimizer": {"device": "nvme", "nvme_path": nvme_dir,
                                                    "pin_memory": False},
                              "offload_param": {"device": "cpu"}},
        "aio": {"block_size": 1 << 20, "queue_depth": 8, "thread_count": 1,
                "single_submit": False, "overlap_events": True},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    return engine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=16.8e6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--nvme-path", default=None, help="directory on the NVMe drive (default: a "
                    "temporary directory under /tmp)")
    a = ap.parse_args()
    root = a.nvme_path or tempfile.gettempdir()
    ds_dir = tempfile.mkdtemp(prefix="ds-nvme-", dir=root)
    tz_dir = tempfile.mkdtemp(prefix="tz-nvme-", dir=root)

    ds_model = model_of(a.params)
    engine = deepspeed_engine(ds_model, ds_dir)
    ours = model_of(a.params)
    n = sum(p.numel() for p in ours.parameters())
    opt = OffloadAdamW(ours.parameters(), **HYPER, state="nvme", nvme_path=tz_dir,
                       host_budget=(256 << 20) + 8 * n)
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1))

    times = {"DeepSpeed ZeRO-3 NVMe": [], "OffloadAdamW(nvme)": []}
    for step in range(a.steps + 1):  # the first step of each is a warm-up
        engine.backward(engine(x).float().pow(2).mean())
        t = time.perf_counter()
        engine.step()
        ds_s = time.perf_counter() - t
        opt.zero_grad()
        ours(x).float().pow(2).mean().backward()
        t = time.perf_counter()
        opt.step()
        tz_s = time.perf_counter() - t
        if step > 0:
            times["DeepSpeed ZeRO-3 NVMe"].append(ds_s)
            times["OffloadAdamW(nvme)"].append(tz_s)
    base = statistics.median(times["DeepSpeed ZeRO-3 NVMe"])
    print(f"{n / 1e6:.1f} M parameters, {a.steps} timed steps, optimizer step only",
          file=sys.stderr)
    for name, ts in times.items():
        s = statistics.median(ts)
        print(f"{name:24s} {s * 1e3:9.1f} ms {base / s:6.2f}", file=sys.stderr)
    ours_s = statistics.median(times["OffloadAdamW(nvme)"])
    print(json.dumps({"bench": "adam.offload_nvme_vs_deepspeed_nvme", "value": ours_s * 1e3,
                      "unit": "ms", "baseline": "DeepSpeed ZeRO-3 offload_optimizer nvme",
                      "baseline_value": base * 1e3, "ratio": base / ours_s}))


if __name__ == "__main__":
    main()
