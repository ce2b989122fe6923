#!/usr/bin/env python3
"""Golden GPT-2 fixture generator for TierZero's tests.

Builds a tiny llm.c-layout GPT-2 (V=61, Vp=64, maxT=16, L=2, NH=4, C=32) from explicit
tensors, runs a hand-written forward in float32 with PyTorch, takes the gradients of the mean
loss with autograd and then trains 5 AdamW steps on the same batch. Everything is written to a
small binary "TZFX" file (format in tests/reference/README.md) that the C++ tests read through
tests/reference/fixture_reader.hpp. PyTorch is a dependency of this script only, never of the
library.

Usage:  python tests/reference/make_gpt2_fixture.py -o tests/fixtures/gpt2_tiny.bin
"""

import argparse
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 0x58465A54  # bytes "TZFX" on disk (little-endian)
VERSION = 1
DTYPE_F32 = 0
DTYPE_I32 = 1

# Model / batch configuration (must match the C++ test).
V, VP, MAXT, L, NH, C = 61, 64, 16, 2, 4, 32
B, T = 2, 8
SEED = 1337

# AdamW hyper-parameters: lr, beta1, beta2, eps, weight_decay, grad_clip.
LR, BETA1, BETA2, EPS, WD, GRAD_CLIP = 1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0
ADAMW_STEPS = 5

# llm.c's parameter order, names and shapes (layers stacked on the first axis).
PARAM_SHAPES = [
    ("wte", (VP, C)),
    ("wpe", (MAXT, C)),
    ("ln1w", (L, C)),
    ("ln1b", (L, C)),
    ("qkvw", (L, 3 * C, C)),
    ("qkvb", (L, 3 * C)),
    ("attprojw", (L, C, C)),
    ("attprojb", (L, C)),
    ("ln2w", (L, C)),
    ("ln2b", (L, C)),
    ("fcw", (L, 4 * C, C)),
    ("fcb", (L, 4 * C)),
    ("fcprojw", (L, C, 4 * C)),
    ("fcprojb", (L, C)),
    ("lnfw", (C,)),
    ("lnfb", (C,)),
]
# Tensors that get weight decay (the matrices; stacked ones are 3-D).
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def init_params(gen):
    """Initial parameters in float32, drawn in PARAM_SHAPES order from one generator."""
    resid_std = 0.02 / math.sqrt(2 * L)
    params = {}
    for name, shape in PARAM_SHAPES:
        if name in ("attprojw", "fcprojw"):
            t = torch.randn(shape, generator=gen, dtype=torch.float32) * resid_std
        elif name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + torch.randn(shape, generator=gen, dtype=torch.float32) * 0.1
        elif name in ("ln1b", "ln2b", "lnfb"):
            t = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.1
        else:  # matrices (incl. wte's padded rows) and the linear biases
            t = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.02
        params[name] = t.contiguous()
    return params


def forward(p, tokens, targets):
    """llm.c GPT-2 forward. Returns (padded logits (B,T,Vp), mean loss over the V real columns)."""
    hs = C // NH
    tok = tokens.long()
    x = p["wte"][tok] + p["wpe"][:T]  # (B,T,C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]  # (B,T,3C)
        q, k, v = qkv[..., 0:C], qkv[..., C : 2 * C], qkv[..., 2 * C : 3 * C]
        q = q.reshape(B, T, NH, hs).transpose(1, 2)  # (B,NH,T,hs)
        k = k.reshape(B, T, NH, hs).transpose(1, 2)
        v = v.reshape(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B,NH,T,T)
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)  # head h -> channels h*hs..(h+1)*hs
        x = x + (y @ p["attprojw"][l].T + p["attprojb"][l])
        h2 = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(h2 @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + (f @ p["fcprojw"][l].T + p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    logits = x @ p["wte"].T  # (B,T,Vp), tied head
    loss = F.cross_entropy(logits[..., :V].reshape(B * T, V), targets.long().reshape(B * T))
    return logits, loss


def run_reference(init, tokens, targets, dtype):
    """Runs the first forward/backward and ADAMW_STEPS AdamW steps in `dtype`.

    Returns a dict of numpy arrays (in `dtype`) keyed by fixture entry name.
    """
    names = [n for n, _ in PARAM_SHAPES]
    p = {n: init[n].to(dtype).clone().requires_grad_(True) for n in names}
    out = {}

    # First forward/backward at the initial weights.
    logits, loss = forward(p, tokens, targets)
    loss.backward()
    out["logits"] = logits[..., :V].detach().numpy().copy()
    out["loss"] = np.array([loss.item()])
    sq = sum(float((p[n].grad.double() ** 2).sum()) for n in names)
    out["grad_norm"] = np.array([math.sqrt(sq)])
    for n in names:
        out["grad." + n] = p[n].grad.detach().numpy().copy()
    assert torch.all(p["wte"].grad[V:] == 0), "padded wte rows must get zero gradient"

    # AdamW on the same batch, starting again from the initial weights.
    for n in names:
        p[n].grad = None
    params = [p[n] for n in names]
    opt = torch.optim.AdamW(
        [
            {"params": [p[n] for n in names if n in DECAYED], "weight_decay": WD},
            {"params": [p[n] for n in names if n not in DECAYED], "weight_decay": 0.0},
        ],
        lr=LR,
        betas=(BETA1, BETA2),
        eps=EPS,
        foreach=False,
        fused=False,
    )
    losses, norms = [], []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, loss = forward(p, tokens, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP, foreach=False)
        losses.append(loss.item())
        norms.append(float(norm))
        opt.step()
    out["adamw_losses"] = np.array(losses)
    out["grad_norms_adamw"] = np.array(norms)
    for n in names:
        out["after5." + n] = p[n].detach().numpy().copy()
    return out


def write_fixture(path, entries):
    """Writes [(name, np.ndarray)] in the TZFX format (float32 or int32 arrays only)."""
    with open(path, "wb") as fh:
        fh.write(struct.pack("<III", MAGIC, VERSION, len(entries)))
        for name, arr in entries:
            arr = np.ascontiguousarray(arr)
            if arr.dtype == np.float32:
                dtype = DTYPE_F32
            elif arr.dtype == np.int32:
                dtype = DTYPE_I32
            else:
                raise TypeError(f"{name}: unsupported dtype {arr.dtype}")
            nb = name.encode("ascii")
            fh.write(struct.pack("<I", len(nb)))
            fh.write(nb)
            fh.write(struct.pack("<II", dtype, arr.ndim))
            fh.write(struct.pack(f"<{arr.ndim}q", *arr.shape))
            fh.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-o", "--output", required=True, help="output fixture path (.bin)")
    ap.add_argument(
        "--no-check64", action="store_true", help="skip the float64 cross-check of the fixture"
    )
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(SEED)

    init = init_params(gen)
    seq = torch.randint(0, V, (B, T + 1), generator=gen, dtype=torch.int64)
    tokens = seq[:, :T].to(torch.int32).contiguous()
    targets = seq[:, 1:].to(torch.int32).contiguous()

    ref = run_reference(init, tokens, targets, torch.float32)

    names = [n for n, _ in PARAM_SHAPES]
    f32 = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    entries = [
        ("config", np.array([V, VP, MAXT, L, NH, C, B, T], dtype=np.int32)),
        ("hparams", f32([LR, BETA1, BETA2, EPS, WD, GRAD_CLIP])),
        ("tokens", tokens.numpy().astype(np.int32)),
        ("targets", targets.numpy().astype(np.int32)),
    ]
    entries += [(n, init[n].numpy().astype(np.float32)) for n in names]
    entries += [("logits", f32(ref["logits"])), ("loss", f32(ref["loss"]))]
    entries += [("grad." + n, f32(ref["grad." + n])) for n in names]
    entries += [("grad_norm", f32(ref["grad_norm"]))]
    entries += [("adamw_losses", f32(ref["adamw_losses"]))]
    entries += [("grad_norms_adamw", f32(ref["grad_norms_adamw"]))]
    entries += [("after5." + n, f32(ref["after5." + n])) for n in names]

    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_fixture(args.output, entries)

    print(f"config   V={V} Vp={VP} maxT={MAXT} L={L} NH={NH} C={C} B={B} T={T} seed={SEED}")
    print(f"loss      {ref['loss'][0]:.7f}   (ln V = {math.log(V):.7f})")
    print(f"grad_norm {ref['grad_norm'][0]:.7f}")
    print("adamw losses     " + " ".join(f"{x:.7f}" for x in ref["adamw_losses"]))
    print("adamw grad norms " + " ".join(f"{x:.7f}" for x in ref["grad_norms_adamw"]))
    print(f"wrote {args.output}: {len(entries)} entries, {os.path.getsize(args.output)} bytes")

    if not args.no_check64:
        # Same initial values and data, everything computed in float64: how much of the fixture
        # is float32 rounding rather than signal.
        r64 = run_reference(init, tokens, targets, torch.float64)
        print("float32 vs float64 (max |diff|, max |diff| / max |ref64|):")
        keys = ["logits", "loss", "grad_norm"]
        keys += ["grad." + n for n in names]
        keys += ["adamw_losses", "grad_norms_adamw"]
        keys += ["after5." + n for n in names]
        worst_grad_rel = 0.0
        for k in keys:
            a, b = ref[k].astype(np.float64), r64[k]
            d = float(np.max(np.abs(a - b)))
            scale = float(np.max(np.abs(b)))
            rel = d / scale if scale > 0 else 0.0
            if k.startswith("grad."):
                worst_grad_rel = max(worst_grad_rel, rel)
            print(f"  {k:22s} {d:10.3e} {rel:10.3e}")
        # after5: also report the update itself (after5 - init), since the values are dominated
        # by the unchanged initial weights. The key bias qkvb[:, C:2C] is reported apart: its exact
        # gradient is zero (softmax is invariant to the per-query constant q.b_k), so in float32 it
        # is pure rounding noise that Adam then amplifies into small but arbitrary updates.
        worst_upd = 0.0
        for n in names:
            upd64 = r64["after5." + n] - init[n].double().numpy()
            upd32 = ref["after5." + n].astype(np.float64) - init[n].double().numpy()
            if n == "qkvb":
                upd64, upd32 = upd64.copy(), upd32.copy()
                kb64, kb32 = upd64[:, C : 2 * C].copy(), upd32[:, C : 2 * C].copy()
                upd64[:, C : 2 * C] = 0.0
                upd32[:, C : 2 * C] = 0.0
            worst_upd = max(worst_upd, float(np.max(np.abs(upd32 - upd64))))
        print(f"  worst grad rel diff {worst_grad_rel:.3e}; worst |update32 - update64| after "
              f"{ADAMW_STEPS} steps {worst_upd:.3e} (lr = {LR}), key bias excluded")
        kg32 = float(np.max(np.abs(ref["grad.qkvb"][:, C : 2 * C])))
        kg64 = float(np.max(np.abs(r64["grad.qkvb"][:, C : 2 * C])))
        print(f"  key bias qkvb[:, C:2C] (exact gradient 0): max |grad| f32 {kg32:.3e} "
              f"f64 {kg64:.3e}; max |update| f32 {np.max(np.abs(kb32)):.3e} "
              f"f64 {np.max(np.abs(kb64)):.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
