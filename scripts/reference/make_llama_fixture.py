#!/usr/bin/env python3
"""Golden Llama-family fixtures for TierZero's tests (run by hand, never by the tests).

Builds a tiny random LlamaForCausalLM (grouped-query attention, Llama 3 rope_scaling, untied
head) and a tiny Qwen2ForCausalLM (q/k/v biases, tied head) with Hugging Face transformers in
float32 on the CPU, and writes into tests/data/llama/<name>/:

  model.safetensors  the weights under Hugging Face's names (what an HF directory holds)
  config.json        the model's Hugging Face config
  reference.tzfx     the same weights ("w.<hf name>"), the batch (tokens, targets), the logits,
                     the loss, every parameter's gradient ("grad.<hf name>"), and the losses and
                     gradient norms of 10 AdamW steps on that batch with TierZero's AdamW
                     (decay on matrices only, global-norm clipping), in the TZFX format of
                     tests/reference/README.md.

Usage:  python scripts/reference/make_llama_fixture.py [-o tests/data/llama]
Needs torch, transformers, safetensors and numpy (pip install torch transformers safetensors).
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

MAGIC = 0x58465A54  # "TZFX"
VERSION = 1
B, T = 2, 16
SEED = 1234
# TierZero's AdamW: lr, beta1, beta2, eps, weight_decay, grad_clip (train_config.hpp defaults
# for betas/eps/decay; a larger lr so 10 steps move).
LR, BETA1, BETA2, EPS, WD, CLIP = 1e-2, 0.9, 0.95, 1e-8, 0.1, 1.0
STEPS = 10

COMMON = dict(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              hidden_act="silu", attention_dropout=0.0, initializer_range=0.02)
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


def make_models():
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    def config(cls, rope_scaling, **kw):
        # transformers >= 5 keeps rope settings in rope_parameters; older ones in rope_theta and
        # rope_scaling.
        try:
            params = {"rope_theta": 10000.0, **(rope_scaling or {"rope_type": "default"})}
            c = cls(**COMMON, rope_parameters=params, **kw)
            if getattr(c, "rope_parameters", None) is None:
                raise TypeError
        except TypeError:
            c = cls(**COMMON, rope_theta=10000.0, rope_scaling=rope_scaling, **kw)
        c._attn_implementation = "eager"
        return c

    llama = config(LlamaConfig, LLAMA3_SCALING, rms_norm_eps=1e-5, tie_word_embeddings=False,
                   attention_bias=False, mlp_bias=False)
    qwen = config(Qwen2Config, None, rms_norm_eps=1e-6, tie_word_embeddings=True)
    return [("llama_tiny", LlamaForCausalLM, llama), ("qwen2_tiny", Qwen2ForCausalLM, qwen)]


def randomize(model, gen):
    """Random weights: N(0, 0.02) matrices, norm gains near 1, small random biases."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=gen))


def loss_of(model, tokens, targets):
    logits = model(input_ids=tokens).logits  # (B, T, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits


def named_params(model):
    # Tied weights appear once (lm_head.weight is model.embed_tokens.weight).
    return list(model.named_parameters())


def adamw_steps(model, tokens, targets):
    decay = [p for n, p in named_params(model) if p.dim() >= 2]
    no_decay = [p for n, p in named_params(model) if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(BETA1, BETA2), eps=EPS)
    losses, norms = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss, _ = loss_of(model, tokens, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    return np.array(losses, np.float32), np.array(norms, np.float32)


def write_tzfx(path, entries):
    with open(path, "wb") as fh:
        fh.write(struct.pack("<III", MAGIC, VERSION, len(entries)))
        for name, arr in entries:
            arr = np.ascontiguousarray(arr)
            dtype = {np.dtype(np.float32): 0, np.dtype(np.int32): 1}[arr.dtype]
            nb = name.encode("ascii")
            fh.write(struct.pack("<I", len(nb)))
            fh.write(nb)
            fh.write(struct.pack("<II", dtype, arr.ndim))
            fh.write(struct.pack(f"<{arr.ndim}q", *arr.shape))
            fh.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def build(out_dir, name, cls, config, gen):
    from safetensors.torch import save_file

    torch.manual_seed(SEED)
    model = cls(config).float().eval()
    randomize(model, gen)
    V = config.vocab_size
    tokens = torch.randint(0, V, (B, T + 1), generator=gen)
    inputs, targets = tokens[:, :T].contiguous(), tokens[:, 1:].contiguous()

    weights = {n: p.detach().clone() for n, p in named_params(model)}
    model.zero_grad()
    loss, logits = loss_of(model, inputs, targets)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in named_params(model)}
    grad_norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads.values())).item()
    losses, norms = adamw_steps(model, inputs, targets)

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    save_file({n: w.contiguous() for n, w in weights.items()}, os.path.join(d, "model.safetensors"))
    with open(os.path.join(d, "config.json"), "w") as fh:
        fh.write(config.to_json_string())
    entries = [("tokens", inputs.numpy().astype(np.int32)),
               ("targets", targets.numpy().astype(np.int32)),
               ("logits", logits.detach().numpy().astype(np.float32)),
               ("loss", np.array([loss.item()], np.float32)),
               ("grad_norm", np.array([grad_norm], np.float32)),
               ("hparams", np.array([LR, BETA1, BETA2, EPS, WD, CLIP], np.float32)),
               ("adamw_losses", losses), ("adamw_grad_norms", norms)]
    entries += [("w." + n, w.numpy().astype(np.float32)) for n, w in weights.items()]
    entries += [("grad." + n, g.numpy().astype(np.float32)) for n, g in grads.items()]
    write_tzfx(os.path.join(d, "reference.tzfx"), entries)
    print(f"{name}: loss {loss.item():.7f} (ln V = {np.log(V):.7f}) grad norm {grad_norm:.7f}")
    print(f"  adamw losses {' '.join(f'{x:.7f}' for x in losses)}")
    print(f"  {len(weights)} tensors, {sum(w.numel() for w in weights.values())} parameters")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", default="tests/data/llama")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)
    for name, cls, config in make_models():
        build(args.out, name, cls, config, gen)
    import transformers
    print(f"torch {torch.__version__} transformers {transformers.__version__}", file=sys.stderr)


if __name__ == "__main__":
    main()
