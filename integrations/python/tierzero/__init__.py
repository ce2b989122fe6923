"""TierZero from Python.

Training (:func:`train`, :class:`Run`), predictions (:func:`estimate`, :func:`plan`), a run's memory profile
(:func:`open_profile`) and a training checkpoint's tensors (:func:`open_checkpoint`) over the C++
library, and :class:`tierzero.torch.OffloadAdamW`, a PyTorch optimizer whose fp32 masters and
Adam moments live in pinned host memory under a budget or on NVMe.

Failures of the library raise :class:`Error`, with ``what``, ``where`` and ``hint`` attributes.
"""
from ._tierzero import Error, memory_report
from ._train import Run, train
from ._estimate import estimate
from ._plan import plan
from ._files import Checkpoint, Profile, open_checkpoint, open_profile

__all__ = [
    "Error",
    "Run",
    "train",
    "estimate",
    "plan",
    "open_profile",
    "open_checkpoint",
    "Profile",
    "Checkpoint",
    "memory_report",
]
