// The parts of the _tierzero extension module, one topic per file, registered by module.cpp.
#pragma once
#include <pybind11/pybind11.h>

#include <type_traits>

#include "cli/estimate_model.hpp"

namespace tierzero::python {

// `field` = settings[key] when the key is there and not None (the Python wrapper has already
// refused unknown keys); a value of the wrong type raises pybind11's cast error.
template <typename T>
void read_setting(const pybind11::dict& settings, const char* key, T& field) {
  if (settings.contains(key) && !settings[key].is_none()) field = settings[key].cast<T>();
}
// The model and world keys estimate() and plan() share (the commands' --model ... --sp flags).
void read_model_and_world(const pybind11::dict& settings, cli::ModelFlags& model,
                          cli::WorldFlags& world);

void bind_errors(pybind11::module_& m);         // errors.cpp: tierzero.Error
void bind_train(pybind11::module_& m);          // train_binding.cpp: train()
void bind_estimate(pybind11::module_& m);       // estimate_binding.cpp: estimate()
void bind_plan(pybind11::module_& m);           // plan_binding.cpp: plan()
void bind_files(pybind11::module_& m);          // files_binding.cpp: profiles, checkpoints
void bind_offload_adamw(pybind11::module_& m);  // offload_adamw_binding.cpp

}  // namespace tierzero::python
