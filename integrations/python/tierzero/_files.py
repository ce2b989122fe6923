"""Reading a run's files: its memory profile (open_profile) and a training checkpoint's tensors
(open_checkpoint)."""
import dataclasses
import os

import numpy as np

from . import _tierzero


@dataclasses.dataclass
class Profile:
    """A run profile (``tierzero train --profile``) as NumPy arrays.

    Byte arrays are indexed ``[row, tier, category]`` with ``tiers`` and ``categories`` naming the
    axes; :meth:`bytes` picks one series. Per step: ``at_start``, ``at_end`` and ``peak``; with
    ``--profile-timeline``, ``timeline_time_s`` / ``timeline_bytes`` hold the bytes after every
    memory event (times in seconds from the first step's start).
    """

    path: str
    run: dict
    tiers: list
    categories: list
    step: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    at_start: np.ndarray
    at_end: np.ndarray
    peak: np.ndarray
    tier_peak: np.ndarray
    timeline_time_s: np.ndarray = None
    timeline_bytes: np.ndarray = None
    timeline_events_dropped: int = 0

    def _index(self, tier, category):
        if tier not in self.tiers:
            raise KeyError(f"no tier {tier!r}; tiers: {self.tiers}")
        if category is not None and category not in self.categories:
            raise KeyError(f"no category {category!r}; categories: {self.categories}")
        return self.tiers.index(tier), (None if category is None else self.categories.index(category))

    def bytes(self, tier, category=None, series="timeline"):
        """Bytes of one tier (summed over categories, or one category) as a 1-D array: along the
        timeline (``series="timeline"``, needs one) or per step (``"at_end"``, ``"peak"``...)."""
        t, c = self._index(tier, category)
        if series == "timeline":
            if self.timeline_bytes is None:
                raise ValueError(f"profile '{self.path}' has no timeline: train with "
                                 "profile_timeline=True (--profile-timeline)")
            data = self.timeline_bytes
        else:
            data = getattr(self, series)
        return data[:, t, :].sum(axis=1) if c is None else data[:, t, c]


def open_profile(path):
    """Reads a run profile written by ``train(..., profile=path)`` or ``tierzero train
    --profile``."""
    d = _tierzero.read_profile(os.fspath(path))
    timeline = d.pop("timeline")
    p = Profile(**d)
    if timeline is not None:
        p.timeline_time_s = timeline["time_s"]
        p.timeline_bytes = timeline["bytes"]
        p.timeline_events_dropped = timeline["events_dropped"]
    return p


def _bfloat16():
    try:
        import ml_dtypes
    except ImportError as e:
        raise ImportError("reading bf16 values needs the ml_dtypes package (pip install "
                          "ml_dtypes); kind='param' reads the fp32 masters without it") from e
    return ml_dtypes.bfloat16


class Checkpoint:
    """A training checkpoint (a ``save_dir``'s step directory, or the ``save_dir`` itself for its
    latest), every rank's files checked whole when opened. Tensors carry the Hugging Face GPT-2
    names and shapes that ``tierzero export`` writes; each is read by range from the ranks'
    CRC-checked blocks when asked for, so memory holds one tensor at a time."""

    def __init__(self, path):
        self._file = _tierzero.CheckpointFile(os.fspath(path))
        self.info = self._file.info()

    @property
    def path(self):
        return self.info["path"]

    @property
    def step(self):
        return self.info["step"]

    def names(self):
        return list(self._file.names())

    def tensor(self, name, kind="param"):
        """Tensor ``name`` as a NumPy array in Hugging Face's shape. kind: "param" (fp32 master
        values, as export writes), "exp_avg" / "exp_avg_sq" (Adam's moments, fp32) or "working"
        (the 16-bit working copy of a bf16/fp16 run: ml_dtypes.bfloat16 or float16)."""
        flat, rows, cols, transpose, kept_rows, shape, dtype = self._file.read(name, kind)
        if dtype == "bf16":
            flat = flat.view(_bfloat16())
        elif dtype == "fp16":
            flat = flat.view(np.float16)
        ours = flat.reshape(rows, cols)[:kept_rows]
        out = ours.T if transpose else ours
        return np.ascontiguousarray(out).reshape(shape)

    def __getitem__(self, name):
        return self.tensor(name)

    def __iter__(self):
        return iter(self.names())

    def __len__(self):
        return len(self.names())


def open_checkpoint(path):
    """Opens a training checkpoint for reading (see :class:`Checkpoint`)."""
    return Checkpoint(path)
