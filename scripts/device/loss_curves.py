#!/usr/bin/env python3
"""Compares two `tierzero train --metrics` runs' loss curves (issue 26's accuracy goal: a bf16 run
follows the fp32 reference's curve within 1% at the end).

    loss_curves.py REFERENCE.jsonl RUN.jsonl [--tolerance 0.01] [--last 20]

Prints the two losses at a few steps along the way and, at the end, the mean loss of the last
`--last` steps of each (one step's loss is one batch's, noisier than the 1% asked) and their
relative difference, as a JSON line; exits 1 when it exceeds the tolerance or the runs differ in
length, 2 when a file is missing or unreadable.
"""
import argparse
import json
import sys


def losses(path):
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                loss = json.loads(line)["loss"]  # null where the run's loss was not finite
                out.append(float("nan") if loss is None else float(loss))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("reference")
    p.add_argument("run")
    p.add_argument("--tolerance", type=float, default=0.01)
    p.add_argument("--last", type=int, default=20)
    a = p.parse_args()
    try:
        ref, run = losses(a.reference), losses(a.run)
    except (OSError, ValueError, KeyError) as e:
        print(f"loss curves: cannot read the metrics: {e}", file=sys.stderr)
        return 2
    if not ref or len(ref) != len(run):
        print(f"loss curves: {len(ref)} reference steps against {len(run)}", file=sys.stderr)
        return 1
    n = len(ref)
    for i in sorted({0, n // 4, n // 2, 3 * n // 4, n - 1}):
        print(f"step {i + 1:5d}: reference {ref[i]:.4f}  run {run[i]:.4f}  "
              f"rel {abs(run[i] - ref[i]) / abs(ref[i]):.4f}")
    k = min(a.last, n)
    ref_end, run_end = sum(ref[-k:]) / k, sum(run[-k:]) / k
    rel = abs(run_end - ref_end) / abs(ref_end)
    ok = rel <= a.tolerance  # False for a NaN
    print(json.dumps({"bench": "train.loss_vs_reference", "value": round(run_end, 5),
                      "unit": "loss", "baseline": "reference", "baseline_value": round(ref_end, 5),
                      "ratio": round(run_end / ref_end, 5), "rel_diff": round(rel, 5),
                      "steps": n, "mean_of_last": k, "tolerance": a.tolerance,
                      "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
