// tierzero.Error: a C++ tierzero::Error becomes this Python exception, carrying `what`, `where`
// and `hint` as attributes (str(e) is the library's one-line message).
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "tierzero/core/error.hpp"

namespace py = pybind11;

namespace tierzero::python {

void bind_errors(py::module_& m) {
  static py::exception<Error> error_type(m, "Error");
  error_type.doc() = "A TierZero failure: .what (what failed), .where (file, rank, tier), .hint";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::object type = py::reinterpret_borrow<py::object>(error_type.ptr());
      py::object instance = type(e.what());
      instance.attr("what") = e.what_failed();
      instance.attr("where") = e.where();
      instance.attr("hint") = e.hint();
      PyErr_SetObject(error_type.ptr(), instance.ptr());
    }
  });
}

}  // namespace tierzero::python
