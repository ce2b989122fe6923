"""The peers of `tierzero bench offload --mode host` (issue 27 (a)): GPT-2 (XL by default) trained
on one GPU with its parameters and optimizer states in host memory, the way a user of each peer
does it:

  fsdp2      PyTorch FSDP2 (`fully_shard` per block and at the root) with `CPUOffloadPolicy` and
             `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`; the AdamW step runs on
             the CPU over the offloaded fp32 parameters (torch.optim.AdamW, fused where the CPU
             build has it, else foreach).
  deepspeed  DeepSpeed ZeRO-3 with `offload_param` and `offload_optimizer` on `cpu` (pinned),
             bf16, its DeepSpeedCPUAdam; one process, no launcher.

Both with activation checkpointing per block (as `bench offload` runs) and clipping at 1, on
random tokens. Prints one JSON object per mode on stdout and a line per mode on stderr; a mode
that cannot run (DeepSpeed not installed, its CPU Adam not buildable) prints why and is skipped.

    python3 scripts/device/peer_offload_torch.py [--mode fsdp2 deepspeed] [--batch 1 --seq 1024]
        [--layers 48 --heads 25 --channels 1600] [--steps 4 --warmup 2] [--device cpu]

A reference script for measurements only: neither peer is a dependency of TierZero. `--device cpu`
with a tiny shape checks the FSDP2 path of the script itself on a machine without a GPU (gloo,
no offload policy: there is no device to offload from).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_gpt2_torch import GPT2  # noqa: E402  (the same model as issue 26's peer)


class Checkpointed(torch.nn.Module):
    """GPT2 whose blocks recompute their activations in the backward."""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, idx, targets):
        m = self.m
        t = idx.shape[1]
        x = m.wte(idx) + m.wpe(torch.arange(t, device=idx.device))
        for block in m.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        logits = m.head(m.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def init_single_process(backend):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=0, world_size=1)


def batch(a, device):
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    return x, y


def timed_steps(a, device, step):
    times, loss = [], None
    for i in range(a.warmup + a.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times), loss


def run_fsdp2(a, device):
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    init_single_process("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    model = Checkpointed(GPT2(a.vocab, a.seq, a.layers, a.heads, a.channels))
    kwargs = {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16,
                                                reduce_dtype=torch.float32)}
    if device.type == "cuda":
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
        mesh = dist.device_mesh.init_device_mesh("cuda", (1,))
    else:
        mesh = dist.device_mesh.init_device_mesh("cpu", (1,))
    for block in model.m.blocks:
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    if device.type == "cuda" and "offload_policy" not in kwargs:
        model.to(device)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0, fused=True)
        adam = "fused"
    except (RuntimeError, ValueError, TypeError):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0)
        adam = "foreach"
    x, y = batch(a, device)

    def step():
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    step_s, loss = timed_steps(a, device, step)
    params = sum(p.numel() for p in model.parameters())
    return step_s, loss, params, {"adamw": adam}


def run_deepspeed(a, device):
    try:
        import deepspeed
    except ImportError as e:
        raise RuntimeError(f"DeepSpeed is not installed here ({e})") from e
    init_single_process("nccl" if device.type == "cuda" else "gloo")
    torch.manual_seed(0)
    config = {
        "train_micro_batch_size_per_gpu": a.batch,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.0}},
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "cpu", "pin_memory": True},
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True,
        },
    }
    # Built under zero.Init, as DeepSpeed's users build a large model: each parameter goes to its
    # partition (here: host memory) as it is made, not a whole fp32 model first.
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = Checkpointed(GPT2(a.vocab, a.seq, a.layers, a.heads, a.channels))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    x, y = batch(a, device)

    def step():
        loss = engine(x, y)
        engine.backward(loss)
        engine.step()
        return loss

    step_s, loss = timed_steps(a, device, step)
    params = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel()
                 for p in model.parameters())
    return step_s, loss, params, {"deepspeed": deepspeed.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=48)
    ap.add_argument("--heads", type=int, default=25)
    ap.add_argument("--channels", type=int, default=1600)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mode", nargs="+", default=["fsdp2", "deepspeed"],
                    choices=["fsdp2", "deepspeed"])
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
    runs = {"fsdp2": run_fsdp2, "deepspeed": run_deepspeed}
    for mode in a.mode:
        try:
            step_s, loss, params, extra = runs[mode](a, device)
        except Exception as e:  # report why one peer cannot run and go on with the next
            print(f"peer offload {mode}: failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        tokens = a.batch * a.seq
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
        r = {"bench": f"peer.offload_{mode}", "value": round(tokens / step_s, 2),
             "unit": "tokens/s", "step_ms": round(step_s * 1e3, 2), "params": params,
             "batch": a.batch, "seq": a.seq, "loss": round(float(loss.item()), 4),
             "peak_device_bytes": peak, "torch": torch.__version__, "device": str(device)}
        r.update(extra)
        print(f"peer offload {mode}: {r['value']:.1f} tokens/s, step {r['step_ms']:.0f} ms, "
              f"peak device {peak / 2**30:.1f} GiB", file=sys.stderr)
        print(json.dumps(r), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
