"""Token shards in llm.c's format (a 256-int32 header: magic 20240520, version 1, token count;
then uint16 tokens) filled with random GPT-2 token ids, for timing llm.c's train_gpt2cu where no
data set can be downloaded (the GPU machine has no network). Throughput does not depend on the
tokens' values.

    python3 scripts/device/llmc_random_shards.py OUT_DIR [--tokens 20000000]
"""
import argparse
import os

import numpy as np


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype(np.uint16).tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokens", type=int, default=20_000_000)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(0)
    write_shard(os.path.join(a.out, "random_train_000001.bin"),
                rng.integers(0, 50257, a.tokens, dtype=np.int64))
    write_shard(os.path.join(a.out, "random_val_000000.bin"),
                rng.integers(0, 50257, 1_000_000, dtype=np.int64))


if __name__ == "__main__":
    main()
