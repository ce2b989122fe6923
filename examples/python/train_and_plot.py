"""Trains a small GPT with TierZero from Python (ZeRO stage 3, Adam's states in pinned host
memory), printing each step, then plots the run's memory per tier over time with matplotlib.

    pip install integrations/python        # once, from the checkout
    python examples/python/train_and_plot.py [--steps 20] [--out memory.png]

Ctrl-C stops after the current step with a checkpoint saved in runs/python-example (run it again
with --resume to continue). matplotlib is optional: without it the plot is skipped, with a note.
"""
import argparse
import os

import tierzero

MIB = 1 << 20


def config(steps, save_dir, resume):
    c = {
        "train_micro_batch_size_per_gpu": 4,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                              "stage3_param_persistence_threshold": 0},
        "tierzero": {
            "steps": steps, "seq_len": 64, "val_batches": 2, "seed": 1,
            "model": {"vocab_size": 257, "n_layer": 4, "n_head": 4, "n_embd": 128,
                      "context_length": 64},
            "checkpoint": {"save_dir": save_dir},
        },
    }
    if resume:
        c["tierzero"]["checkpoint"]["resume"] = save_dir
    return c


def plot(profile, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: skipping the plot (pip install matplotlib)")
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    for tier in profile.tiers:
        series = profile.bytes(tier) / MIB
        if series.max() > 0:
            ax.step(profile.timeline_time_s, series, where="post", label=tier)
    ax.set_xlabel("seconds since the first step")
    ax.set_ylabel("MiB held")
    ax.set_title(f"TierZero memory per tier: {profile.run['model']}, stage {profile.run['stage']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", default="memory.png")
    ap.add_argument("--save-dir", default=os.path.join("runs", "python-example"))
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    profile_path = a.save_dir.rstrip("/") + ".profile.json"  # beside, never inside, the checkpoints
    os.makedirs(a.save_dir, exist_ok=True)

    def show(m):
        print(f"step {m['step']:4d}  loss {m['loss']:.4f}  {m['seconds'] * 1000:7.1f} ms  "
              f"{m['tokens_per_second']:9.0f} tok/s")

    try:
        tierzero.train(config(a.steps, a.save_dir, a.resume), show, quiet=True,
                       profile=profile_path, timeline=True)
    except KeyboardInterrupt:
        print(f"stopped; the checkpoint in {a.save_dir} resumes it (--resume)")
        return
    p = tierzero.open_profile(profile_path)
    for tier in p.tiers:
        print(f"{tier:7s} peak {p.tier_peak[:, p.tiers.index(tier)].max() / MIB:8.2f} MiB")
    plot(p, a.out)


if __name__ == "__main__":
    main()
