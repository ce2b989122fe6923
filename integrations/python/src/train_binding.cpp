// _tierzero.train: one training run from Python, with the GIL released while C++ computes. Each
// step's record goes to a Python callback; Ctrl-C stops the run after the current step with the
// checkpoint saved, as SIGINT does for `tierzero train`:
//   - with a save_dir, the trainer's own SIGINT/SIGTERM handlers are installed for the run: the
//     step finishes, the ranks agree, the checkpoint is written, and KeyboardInterrupt is raised
//     once the run has ended;
//   - without one, Python's handler notes the signal; the step listener sees it after the step
//     and stops the run (no checkpoint was asked for), and the KeyboardInterrupt is raised then.
// An exception in the callback, or the callback returning False, stops the run the same way.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "bindings.hpp"
#include "offload_adamw.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/trainer.hpp"
#include "tierzero/train/training_checkpoint.hpp"

namespace py = pybind11;

namespace tierzero::python {
namespace {

py::dict record_dict(const train::StepRecord& r) {
  py::dict d;
  d["step"] = r.step;
  d["loss"] = r.loss;
  d["lr"] = r.lr;
  d["grad_norm"] = r.grad_norm;
  d["seconds"] = r.seconds;
  d["cpu_seconds"] = r.cpu_seconds;
  d["tokens_per_second"] = r.tokens_per_second;
  d["fetch_counted"] = r.fetch_counted;
  d["prefetch_hits"] = r.prefetch_hits;
  d["on_demand_fetches"] = r.on_demand_fetches;
  d["stall_s"] = r.stall_s;
  d["nvme_reads"] = r.nvme_reads;
  d["handoffs"] = r.handoffs;
  d["reductions"] = r.reductions;
  d["reduction_s"] = r.reduction_s;
  d["reduction_exposed_s"] = r.reduction_exposed_s;
  return d;
}

py::dict result_dict(const train::TrainResult& r, bool interrupted) {
  py::list steps;
  for (const auto& s : r.steps) steps.append(record_dict(s));
  py::dict d;
  d["steps"] = steps;
  d["val_loss"] = r.val_loss;
  d["unigram_entropy"] = r.unigram_entropy;
  d["parameter_count"] = r.parameter_count;
  d["device_name"] = r.device_name;
  d["rank"] = r.rank;
  d["interrupted"] = interrupted;
  return d;
}

// The step listener: runs with the GIL held; remembers the first Python exception (a
// KeyboardInterrupt included) to raise once the run has ended.
struct Listener {
  py::object callback;  // None or callable(dict) -> None / bool
  std::unique_ptr<py::error_already_set> pending;

  bool operator()(const train::StepRecord& r) {
    py::gil_scoped_acquire gil;
    if (pending) return false;
    try {
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (callback.is_none()) return true;
      py::object ret = callback(record_dict(r));
      return !(ret.is(py::bool_(false)));
    } catch (py::error_already_set& e) {
      pending = std::make_unique<py::error_already_set>(std::move(e));
      return false;
    }
  }
};

py::dict train(const std::string& json_text, const std::string& source, py::object callback,
               bool quiet, const std::string& metrics, const std::string& memory_json,
               const std::string& profile, bool timeline) {
  train::TrainConfig config = train::TrainConfig::parse(json_text, source);
  // The trainer takes SIGINT and SIGTERM itself (ending the run after its step) when it has
  // something to write on them: training checkpoints, or the --save model (save_checkpoint).
  const bool signals_saved = !config.checkpoint.save_dir.empty() || !config.save_checkpoint.empty();
  module_mpi_session();  // MPI outlives this run: a later run or optimizer may need it again
  train::Trainer trainer(config);
  if (!profile.empty()) trainer.set_profile(profile, timeline);
  auto listener = std::make_shared<Listener>();
  listener->callback = std::move(callback);
  trainer.set_step_listener([listener](const train::StepRecord& r) { return (*listener)(r); });
  train::TrainResult result;
  {
    py::gil_scoped_release release;
    result = trainer.run(quiet ? nullptr : stderr, metrics, memory_json);
  }
  if (listener->pending) throw py::error_already_set(*listener->pending);
  if (signals_saved && train::StopSignals::signal() == SIGINT) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
  return result_dict(result, signals_saved && train::StopSignals::requested());
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("train", &train, py::arg("config_json"), py::arg("source"), py::arg("callback"),
        py::arg("quiet"), py::arg("metrics"), py::arg("memory_json"), py::arg("profile"),
        py::arg("timeline"));
}

}  // namespace tierzero::python
