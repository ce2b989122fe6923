"""Shared settings of the tierzero package's tests: a tiny GPT that trains in seconds on the
built-in corpus (the C++ tests' tiny model)."""
import copy

import pytest

TINY = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1}},
    "zero_optimization": {"stage": 0},
    "tierzero": {
        "steps": 4, "seq_len": 16, "val_batches": 1, "seed": 1337, "threads": 1,
        "model": {"vocab_size": 257, "n_layer": 2, "n_head": 2, "n_embd": 32,
                  "context_length": 16},
    },
}


@pytest.fixture
def tiny_config():
    return copy.deepcopy(TINY)
