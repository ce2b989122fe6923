"""OffloadAdamW's step against DeepSpeed's CPU Adam (DeepSpeedCPUAdam) and torch.optim.AdamW on the
same model in the same run: parameters updated per second and step time, median over the timed
steps, the optimizers' steps interleaved so a loaded machine slows them alike.

    python integrations/python/bench/bench_offload_adamw.py [--params 32e6] [--steps 5]
        [--nvme-path DIR] [--no-deepspeed]

Prints a table on stderr and one JSON object per result on stdout (DESIGN.md's bench format;
baseline: DeepSpeedCPUAdam when it can be built, else torch.optim.AdamW; ratio = baseline time /
our time, higher is better). DeepSpeed is optional: without it (or when its op cannot be built)
the table says why and compares with torch only.

DeepSpeed's NVMe optimizer swapping (its ZeRO-3 engine's optimizer swapper) needs its async_io op,
which needs libaio (Debian: apt-get install libaio-dev) to build; that is for the peer's
measurement only: TierZero's NVMe path uses io_uring and does not depend on libaio. See
docs/benchmarks.md for what was and was not measured.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time

import torch

from tierzero.torch import OffloadAdamW

HYPER = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def model_of(params):
    width = 2048
    layers = max(1, round(params / (width * width)))
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])


def with_grads(model):
    g = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g) * 1e-3
    return model


def deepspeed_cpu_adam(params):
    try:
        from deepspeed.ops.adam import DeepSpeedCPUAdam
    except Exception as e:  # not installed, or its import fails here
        return None, f"deepspeed not importable: {e}"
    try:
        return DeepSpeedCPUAdam(params, adamw_mode=True, **HYPER), ""
    except Exception as e:  # the JIT build of its C++ op failed
        return None, f"DeepSpeedCPUAdam could not be built: {e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=float, default=32e6)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--no-deepspeed", action="store_true", help="compare with torch only")
    ap.add_argument("--nvme-path", default=None, help="directory for the NVMe state (default: a "
                    "temporary directory under /tmp)")
    a = ap.parse_args()
    nvme_dir = a.nvme_path or tempfile.mkdtemp(prefix="tz-bench-")

    runs = {}
    ref_model = with_grads(model_of(a.params))
    n = sum(p.numel() for p in ref_model.parameters())
    runs["torch.optim.AdamW"] = (ref_model, torch.optim.AdamW(ref_model.parameters(), **HYPER))
    ds_model = with_grads(model_of(a.params))
    ds_opt, why_not = (None, "DeepSpeed left out (--no-deepspeed)") if a.no_deepspeed else \
        deepspeed_cpu_adam(list(ds_model.parameters()))
    if ds_opt is not None:
        runs["DeepSpeedCPUAdam"] = (ds_model, ds_opt)
    budget = 16 * n + (256 << 20)
    for state in ("host", "nvme"):
        m = with_grads(model_of(a.params))
        runs[f"OffloadAdamW({state})"] = (m, OffloadAdamW(
            m.parameters(), **HYPER, state=state, nvme_path=nvme_dir, host_budget=budget))

    times = {name: [] for name in runs}
    for step in range(a.steps + 1):  # the first step of each is a warm-up
        for name, (_, opt) in runs.items():
            t = time.perf_counter()
            opt.step()
            if step > 0:
                times[name].append(time.perf_counter() - t)

    baseline = "DeepSpeedCPUAdam" if "DeepSpeedCPUAdam" in runs else "torch.optim.AdamW"
    base_s = statistics.median(times[baseline])
    print(f"{n / 1e6:.1f} M parameters, {a.steps} timed steps, {torch.get_num_threads()} threads"
          + (f"; {why_not}" if why_not else ""), file=sys.stderr)
    print(f"{'optimizer':24s} {'step ms':>9s} {'Mparam/s':>9s} {'vs ' + baseline:>22s}",
          file=sys.stderr)
    for name, ts in times.items():
        s = statistics.median(ts)
        print(f"{name:24s} {s * 1e3:9.1f} {n / s / 1e6:9.1f} {base_s / s:22.2f}", file=sys.stderr)
        if name.startswith("OffloadAdamW"):
            state = name[len("OffloadAdamW("):-1]
            print(json.dumps({"bench": f"adam.offload_{state}", "value": n / s / 1e6,
                              "unit": "Mparam/s", "step_ms": s * 1e3, "baseline": baseline,
                              "baseline_value": n / base_s / 1e6, "ratio": base_s / s}))


if __name__ == "__main__":
    main()
