"""tierzero.plan: the fastest configuration that fits given memory budgets, before a run."""
import os

from . import _tierzero

_KEYS = {
    "model", "hf_config", "layers", "heads", "channels", "vocab", "context", "ranks", "dp", "tp",
    "pp", "sp", "sequence_parallel", "device_mem", "host_mem", "ranks_per_node", "nvme",
    "nvme_path", "seq", "global_batch", "margin", "calibration", "device", "threads", "recompute",
    "precision",
}


def plan(device_mem, **settings):
    """The plan ``tierzero plan --json`` prints, as a dict: the settings, the ``rates`` (measured
    here, or from ``calibration``), the configurations ``considered`` and the fastest that would
    not fit (``rejected``), the ``chosen`` one with its predicted step time and bytes per tier, and
    its ``config`` (a dict for :func:`train`).

    device_mem, host_mem, nvme: bytes per rank. The other keywords mirror the command's flags:
    model ("gpt2", ...), hf_config, layers, heads, channels, vocab, context, ranks, dp, tp, pp, sp,
    sequence_parallel, ranks_per_node, nvme_path, seq, global_batch, margin, calibration (a rates
    file: measuring takes seconds), device ("cpu", "cuda"), threads, recompute ("none",
    "selective" or "full": search only that mode), precision ("fp32", "bf16" or "fp16": the
    working parameters' type, written to the config; default fp32). Raises :class:`Error` when no
    configuration fits (its hint says what to give more of).
    """
    unknown = set(settings) - _KEYS
    if unknown:
        raise TypeError(f"plan() got unknown settings {sorted(unknown)}; known: {sorted(_KEYS)}")
    for key in ("calibration", "hf_config", "nvme_path"):
        if settings.get(key) is not None:
            settings[key] = os.fspath(settings[key])
    return _tierzero.plan(dict(settings, device_mem=int(device_mem)))
