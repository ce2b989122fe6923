// The parts of the _tierzero extension module, one topic per file, registered by module.cpp.
#pragma once
#include <pybind11/pybind11.h>

namespace tierzero::python {

void bind_errors(pybind11::module_& m);         // errors.cpp: tierzero.Error
void bind_train(pybind11::module_& m);          // train_binding.cpp: train()
void bind_estimate(pybind11::module_& m);       // estimate_binding.cpp: estimate()
void bind_plan(pybind11::module_& m);           // plan_binding.cpp: plan()
void bind_files(pybind11::module_& m);          // files_binding.cpp: profiles, checkpoints
void bind_offload_adamw(pybind11::module_& m);  // offload_adamw_binding.cpp

}  // namespace tierzero::python
