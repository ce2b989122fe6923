// _tierzero.estimate: the bytes per tier and category each rank will hold, as `tierzero estimate
// --json` reports them (the same builder, src/cli/estimate_report.cpp), from keyword settings
// that mirror the command's flags.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.hpp"
#include "cli/estimate_model.hpp"
#include "cli/estimate_report.hpp"

namespace py = pybind11;

namespace tierzero::python {
namespace {

py::object estimate(const py::dict& kw) {
  cli::ModelFlags model;
  cli::WorldFlags world;
  cli::RunFlags run;
  read_model_and_world(kw, model, world);
  const auto get = [&](const char* key, auto& field) { read_setting(kw, key, field); };
  get("config", run.config);
  get("stage", run.stage);
  get("offload_param", run.offload_param);
  get("offload_param_ratio", run.offload_param_ratio);
  get("offload_optimizer", run.offload_optimizer);
  get("offload_optimizer_ratio", run.offload_optimizer_ratio);
  get("micro_batch", run.micro_batch);
  get("seq", run.seq);
  get("checkpointing", run.checkpointing);
  get("recompute", run.recompute);
  get("activation_offload", run.activation_offload);
  get("precision", run.precision);
  get("device", run.device);
  std::string text;
  {
    py::gil_scoped_release release;
    const cli::EstimateSettings s = cli::resolve_settings(model, world, run);
    text = cli::estimate_report(s, profile::estimate(s.input), profile::estimate_table(s.input))
               .dump();
  }
  return py::module_::import("json").attr("loads")(text);
}

}  // namespace

void read_model_and_world(const py::dict& kw, cli::ModelFlags& model, cli::WorldFlags& world) {
  read_setting(kw, "model", model.model);
  read_setting(kw, "hf_config", model.hf_config);
  read_setting(kw, "layers", model.layers);
  read_setting(kw, "heads", model.heads);
  read_setting(kw, "channels", model.channels);
  read_setting(kw, "vocab", model.vocab);
  read_setting(kw, "context", model.context);
  read_setting(kw, "ranks", world.ranks);
  read_setting(kw, "dp", world.dp);
  read_setting(kw, "tp", world.tp);
  read_setting(kw, "pp", world.pp);
  read_setting(kw, "sp", world.sp);
  read_setting(kw, "sequence_parallel", world.sequence_parallel);
}

void bind_estimate(py::module_& m) {
  m.def("estimate", &estimate, py::arg("settings"),
        "bytes per tier and category per rank (the keys of `tierzero estimate --json`)");
}

}  // namespace tierzero::python
