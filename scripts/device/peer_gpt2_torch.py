"""The PyTorch peer of `tierzero bench train --device cuda` (issue 26): GPT-2 trained the way a
PyTorch user trains it on one GPU — bf16 autocast over fp32 weights, scaled_dot_product_attention
(causal; the flash kernel on Hopper), fused AdamW — eager or under torch.compile, on random tokens.
Prints one JSON object per mode on stdout (DESIGN.md's bench format, without a baseline: the
device script compares it with TierZero and llm.c) and a line per mode on stderr.

    python3 scripts/device/peer_gpt2_torch.py --batch 16 --seq 1024 [--mode eager compile]
        [--layers 12 --heads 12 --channels 768] [--steps 20 --warmup 5] [--device cpu]

A reference script for measurements only: PyTorch is never a dependency of TierZero. `--device
cpu` with a tiny shape checks the script itself on a machine without a GPU.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        # (B, NH, T, HD) each
        q, k, v = (z.view(b, t, self.nh, c // self.nh).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, vocab, ctx, layers, heads, channels):
        super().__init__()
        self.wte = nn.Embedding(vocab, channels)
        self.wpe = nn.Embedding(ctx, channels)
        self.blocks = nn.ModuleList(Block(channels, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(channels)
        self.head = nn.Linear(channels, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def measure(mode, a, device):
    torch.manual_seed(0)
    model = GPT2(a.vocab, a.seq, a.layers, a.heads, a.channels).to(device)
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.0, fused=fused)
    step_fn = model
    if mode == "compile":
        step_fn = torch.compile(model)
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), generator=g).to(device)
    dtype = torch.bfloat16
    times = []
    loss = None
    for i in range(a.warmup + a.steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    params = sum(p.numel() for p in model.parameters())
    tokens = a.batch * a.seq
    flops = 6 * params * tokens + 6 * a.layers * a.channels * a.seq * tokens
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else 0
    return {"bench": f"peer.torch_{mode}", "value": round(tokens / step_s, 1), "unit": "tokens/s",
            "step_ms": round(step_s * 1e3, 3), "model_tflops": round(flops / step_s / 1e12, 3),
            "params": params, "batch": a.batch, "seq": a.seq, "loss": round(loss.item(), 4),
            "peak_bytes": peak, "torch": torch.__version__, "device": str(device)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--channels", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--mode", nargs="+", default=["eager", "compile"], choices=["eager", "compile"])
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # what a PyTorch user sets; products are bf16
    for mode in a.mode:
        try:
            r = measure(mode, a, device)
        except Exception as e:  # report the failure of one mode and go on with the next
            print(f"peer torch {mode}: failed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        print(f"peer torch {mode}: {r['value']:.0f} tokens/s, step {r['step_ms']:.1f} ms, "
              f"{r['model_tflops']:.1f} model TFLOP/s, peak {r['peak_bytes'] / 2**30:.1f} GiB",
              file=sys.stderr)
        print(json.dumps(r), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


if __name__ == "__main__":
    main()
