"""tierzero.train and tierzero.Run: a training run from Python.

The C++ trainer runs with the GIL released. Each step's record (the C++ StepRecord's fields) is
handed over as a dict. Ctrl-C finishes the current step, then stops the run; with a
``checkpoint.save_dir`` in the config the checkpoint is written first, exactly as SIGINT does for
``tierzero train``, and ``--resume`` (``checkpoint.resume``) continues it. KeyboardInterrupt is
raised once the run has ended cleanly.
"""
import queue
import threading

from . import _tierzero
from ._config import config_text


def train(config, callback=None, *, quiet=False, metrics=None, memory_json=None, profile=None,
          timeline=False):
    """Trains as ``tierzero train --config`` would and returns the run's result (a dict: ``steps``,
    a list of per-step dicts, ``val_loss``, ``parameter_count``, ``rank``, ...).

    config: a dict (the JSON config's content) or a path. callback(step_dict) runs after every
    step on every rank; returning False (or raising) stops the run after that step on all ranks.
    metrics / memory_json / profile: paths, as the command's --metrics, --memory-json, --profile
    (timeline: --profile-timeline). quiet: no progress lines on stderr.
    """
    text, source = config_text(config)
    return _tierzero.train(text, source, callback, bool(quiet), metrics or "", memory_json or "",
                           profile or "", bool(timeline))


class Run:
    """Iterates over a training run's steps: ``for m in tierzero.Run(config): ...``.

    The run trains on a thread of its own, one step ahead at most; each iteration yields the
    step's dict. Leaving the loop early (break) stops the run after the step in progress (and
    writes the checkpoint when the config saves them); ``result`` holds the run's result once it
    has ended. The keywords are train()'s.
    """

    def __init__(self, config, **options):
        self._text, self._source = config_text(config)
        self._options = options
        self._stop = threading.Event()
        self._records = queue.Queue(maxsize=1)
        self.result = None

    def _listen(self, record):
        if self._stop.is_set():
            return False
        while not self._stop.is_set():
            try:
                self._records.put(("step", record), timeout=0.1)
                break
            except queue.Full:
                continue
        return not self._stop.is_set()

    def _work(self):
        o = self._options
        try:
            out = _tierzero.train(self._text, self._source, self._listen, bool(o.get("quiet")),
                                  o.get("metrics") or "", o.get("memory_json") or "",
                                  o.get("profile") or "", bool(o.get("timeline")))
            self._records.put(("done", out))
        except BaseException as e:  # handed to the iterating thread, raised there
            self._records.put(("error", e))

    def __iter__(self):
        worker = threading.Thread(target=self._work, name="tierzero-train", daemon=True)
        worker.start()
        try:
            while True:
                try:
                    kind, value = self._records.get(timeout=0.1)
                except queue.Empty:
                    continue
                if kind == "step":
                    yield value
                elif kind == "done":
                    self.result = value
                    if value.get("interrupted"):
                        raise KeyboardInterrupt
                    return
                else:
                    raise value
        finally:
            # Ctrl-C here, a break or an error: the run ends after the step in progress (the
            # trainer writes its checkpoint then); wait for it so nothing is left half-written.
            self._stop.set()
            while worker.is_alive() or not self._records.empty():
                try:
                    kind, value = self._records.get(timeout=0.1)
                    if kind == "done":
                        self.result = value
                except queue.Empty:
                    pass
            worker.join()
