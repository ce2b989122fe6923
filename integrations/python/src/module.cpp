// _tierzero: the extension module behind the Python package `tierzero` (integrations/python).
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "offload_adamw.hpp"

PYBIND11_MODULE(_tierzero, m) {
  m.doc() = "TierZero's C++ library from Python (see the package tierzero)";
  tierzero::python::bind_errors(m);
  tierzero::python::bind_train(m);
  tierzero::python::bind_estimate(m);
  tierzero::python::bind_plan(m);
  tierzero::python::bind_files(m);
  tierzero::python::bind_offload_adamw(m);
  // MPI, when the module started it, ends with the interpreter (before the module is unloaded).
  pybind11::module_::import("atexit").attr("register")(
      pybind11::cpp_function([] { tierzero::python::close_module_mpi_session(); }));
}
