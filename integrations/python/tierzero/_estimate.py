"""tierzero.estimate: bytes per tier and category per rank before a run."""
import json
import os
import tempfile

from . import _tierzero

_KEYS = {
    "model", "layers", "heads", "channels", "vocab", "context", "ranks", "dp", "tp", "pp", "sp",
    "sequence_parallel", "config", "stage", "offload_param", "offload_param_ratio",
    "offload_optimizer", "offload_optimizer_ratio", "micro_batch", "seq", "checkpointing",
    "recompute", "activation_offload", "precision", "device",
}


def estimate(**settings):
    """What each rank will hold, as ``tierzero estimate --json`` reports it (a dict: ``tiers``,
    ``buffers``, ``totals`` per tier, the ``table`` over every stage and offload option, ...).

    Keywords mirror the command's flags: model ("gpt2", ...), layers, heads, channels, vocab,
    context, ranks, dp, tp, pp, sp, sequence_parallel, config (a dict or a path), stage,
    offload_param / offload_optimizer ("none", "cpu", "nvme"), their *_ratio, micro_batch, seq,
    checkpointing, recompute ("none", "selective", "full"), activation_offload ("device", "host",
    "nvme"), precision ("fp32", "bf16", "fp16": the working parameters' type), device ("cpu",
    "cuda" or "cuda:N": the compute dtype follows it, 16-bit on CUDA with 16-bit parameters).
    """
    unknown = set(settings) - _KEYS
    if unknown:
        raise TypeError(f"estimate() got unknown settings {sorted(unknown)}; known: {sorted(_KEYS)}")
    config = settings.get("config")
    if isinstance(config, dict):
        with tempfile.TemporaryDirectory(prefix="tierzero-estimate-") as d:
            path = os.path.join(d, "config.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(config, f)
            return _tierzero.estimate(dict(settings, config=path))
    if config is not None:
        settings["config"] = os.fspath(config)
    return _tierzero.estimate(settings)
