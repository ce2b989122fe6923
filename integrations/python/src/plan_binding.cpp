// _tierzero.plan: the fastest configuration that fits the given memory budgets, as `tierzero plan
// --json` reports it (the same builder, src/cli/plan_report.cpp), from keyword settings that
// mirror the command's flags. No configuration fitting raises the command's Error.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "bindings.hpp"
#include "cli/plan_report.hpp"

namespace py = pybind11;

namespace tierzero::python {
namespace {

py::object plan(const py::dict& kw) {
  cli::PlanFlags f;
  read_model_and_world(kw, f.model, f.world);
  const auto get = [&](const char* key, auto& field) { read_setting(kw, key, field); };
  get("device_mem", f.device_mem);
  get("host_mem", f.host_mem);
  get("ranks_per_node", f.ranks_per_node);
  get("nvme", f.nvme);
  get("nvme_path", f.nvme_path);
  get("seq", f.seq);
  get("global_batch", f.global_batch);
  get("margin", f.margin);
  get("calibration", f.calibration);
  get("device", f.device);
  get("threads", f.threads);
  get("recompute", f.recompute);
  get("precision", f.precision);
  std::string text;
  {
    py::gil_scoped_release release;
    std::unique_ptr<cli::PlanSetup> setup = cli::prepare_plan(f);
    const nlohmann::json report = cli::plan_report(*setup);
    cli::check_plan_found(report);
    text = report.dump();
  }
  return py::module_::import("json").attr("loads")(text);
}

}  // namespace

void bind_plan(py::module_& m) {
  m.def("plan", &plan, py::arg("settings"),
        "the fastest configuration that fits (the keys of `tierzero plan --json`)");
}

}  // namespace tierzero::python
