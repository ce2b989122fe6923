#!/usr/bin/env python3
"""Checks by hand that transformers loads what `tierzero export --hf-dir` writes (issue 30).

Loads the exported directory with AutoModelForCausalLM.from_pretrained(DIR) (float32) and
compares its logits on random tokens with those of the same checkpoint's llm.c model file
(`train --save model.bin` of the same step; its values are the checkpoint's, bit for bit), run
through the hand-written llm.c GPT-2 forward that tests/reference/make_gpt2_fixture.py uses and
test_nn checks TierZero against. The llm.c weights are first rounded to the directory's
torch_dtype (bf16 / fp16), so the logits must agree to float32 rounding whatever the dtype.
transformers and torch are dependencies of this script only (pip install torch transformers).

For the Llama family (no llm.c file), --against REF_DIR compares the logits of DIR with those of
the directory the model came from (e.g. tests/data/llama/llama_tiny, loaded with --load, trained
0 steps, saved with --save-dir and exported), both through transformers.

Usage:  python3 scripts/reference/check_hf_export.py DIR model.bin [--tol 1e-4]
        python3 scripts/reference/check_hf_export.py DIR --against REF_DIR [--tol 1e-4]
"""

import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM

KINDS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
         "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]


def read_llmc(path):
    """The llm.c model file (magic 20240326, version 3): its dims and tensors, layers stacked."""
    head = np.fromfile(path, dtype=np.int32, count=256)
    assert head[0] == 20240326 and head[1] == 3, f"{path} is not an llm.c fp32 model file"
    maxT, V, L, NH, C, Vp = (int(head[i]) for i in (2, 3, 4, 5, 6, 7))
    shapes = {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C),
              "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C), "attprojw": (L, C, C),
              "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C), "fcw": (L, 4 * C, C),
              "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C), "lnfw": (C,),
              "lnfb": (C,)}
    flat = np.fromfile(path, dtype=np.float32)[256:]
    p, at = {}, 0
    for k in KINDS:
        n = math.prod(shapes[k])
        p[k] = torch.from_numpy(flat[at:at + n].copy()).reshape(shapes[k])
        at += n
    assert at == flat.size, f"{path}: {flat.size} floats, the header's model has {at}"
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), p


def forward(d, p, tokens):
    """llm.c GPT-2 forward (make_gpt2_fixture.py's): logits (B, T, V) of the real vocabulary."""
    B, T = tokens.shape
    C, NH, L = d["C"], d["NH"], d["L"]
    hs = C // NH
    x = p["wte"][tokens] + p["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        h = F.layer_norm(x, (C,), p["ln1w"][l], p["ln1b"][l], eps=1e-5)
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = (qkv[..., i * C:(i + 1) * C].reshape(B, T, NH, hs).transpose(1, 2)
                   for i in range(3))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + (y @ p["attprojw"][l].T + p["attprojb"][l])
        h2 = F.layer_norm(x, (C,), p["ln2w"][l], p["ln2b"][l], eps=1e-5)
        f = F.gelu(h2 @ p["fcw"][l].T + p["fcb"][l], approximate="tanh")
        x = x + (f @ p["fcprojw"][l].T + p["fcprojb"][l])
    x = F.layer_norm(x, (C,), p["lnfw"], p["lnfb"], eps=1e-5)
    return (x @ p["wte"].T)[..., :d["V"]]


def load(path):
    # transformers 5 calls the argument dtype, 4 torch_dtype.
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    return AutoModelForCausalLM.from_pretrained(path, **{key: torch.float32}).eval()


def compare_directories(path, ref_path, tol):
    """0 when both directories' logits on random tokens agree within tol."""
    model, ref = load(path), load(ref_path)
    V = ref.config.vocab_size
    tokens = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(tokens).logits, ref(tokens).logits
    err = (ours - theirs).abs().max().item()
    print(f"{type(model).__name__} from '{path}' against '{ref_path}': logits {tuple(ours.shape)}, "
          f"max |logit| {theirs.abs().max().item():.4g}, max abs difference {err:.3g} (tol {tol:g})")
    return 0 if err <= tol else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("model_bin", nargs="?")
    ap.add_argument("--against", help="a Hugging Face directory to compare logits with")
    ap.add_argument("--tol", type=float, default=1e-4, help="max abs logit difference")
    a = ap.parse_args()
    if a.against:
        sys.exit(compare_directories(a.dir, a.against, a.tol))
    d, p = read_llmc(a.model_bin)
    with open(f"{a.dir}/config.json") as f:
        torch_dtype = json.load(f).get("torch_dtype", "float32")
    rounding = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(torch_dtype)
    if rounding is not None:  # the directory holds the weights rounded to its dtype
        p = {k: v.to(rounding).to(torch.float32) for k, v in p.items()}
    model = load(a.dir)
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, d["V"], (2, d["maxT"]), generator=gen)
    with torch.no_grad():
        ours = forward(d, p, tokens)
        theirs = model(tokens).logits
    assert theirs.shape == ours.shape, (theirs.shape, ours.shape)
    err = (theirs - ours).abs().max().item()
    loss_ours = F.cross_entropy(ours[:, :-1].reshape(-1, d["V"]), tokens[:, 1:].reshape(-1))
    loss_theirs = F.cross_entropy(theirs[:, :-1].reshape(-1, d["V"]), tokens[:, 1:].reshape(-1))
    print(f"{type(model).__name__} from '{a.dir}' ({torch_dtype}): logits {tuple(theirs.shape)}, "
          f"max |logit| {ours.abs().max().item():.4g}, max abs difference {err:.3g} "
          f"(tol {a.tol:g}); loss ours {loss_ours.item():.6f}, transformers "
          f"{loss_theirs.item():.6f}")
    sys.exit(0 if err <= a.tol else 1)


if __name__ == "__main__":
    main()
