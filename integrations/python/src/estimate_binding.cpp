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
  auto get = [&](const char* key, auto& field) {
    using T = std::remove_reference_t<decltype(field)>;
    if (kw.contains(key) && !kw[key].is_none()) field = kw[key].cast<T>();
  };
  get("model", model.model);
  get("layers", model.layers);
  get("heads", model.heads);
  get("channels", model.channels);
  get("vocab", model.vocab);
  get("context", model.context);
  get("ranks", world.ranks);
  get("dp", world.dp);
  get("tp", world.tp);
  get("pp", world.pp);
  get("sp", world.sp);
  get("sequence_parallel", world.sequence_parallel);
  get("config", run.config);
  get("stage", run.stage);
  get("offload_param", run.offload_param);
  get("offload_param_ratio", run.offload_param_ratio);
  get("offload_optimizer", run.offload_optimizer);
  get("offload_optimizer_ratio", run.offload_optimizer_ratio);
  get("micro_batch", run.micro_batch);
  get("seq", run.seq);
  get("checkpointing", run.checkpointing);
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

void bind_estimate(py::module_& m) {
  m.def("estimate", &estimate, py::arg("settings"),
        "bytes per tier and category per rank (the keys of `tierzero estimate --json`)");
}

}  // namespace tierzero::python
