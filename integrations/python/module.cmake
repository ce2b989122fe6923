# The `_tierzero` extension module's target, defined once for both builds that make it:
# integrations/python/CMakeLists.txt (what `pip install integrations/python` runs, building the
# library from the checkout) and the project's own build (TIERZERO_PYTHON, cmake/PythonModule.cmake:
# the ci preset builds the module beside the tests from the same position-independent objects,
# and the Python suite installs that file instead of compiling the library a second time).
# Needs Python (Development.Module) and pybind11 found, and the library's targets defined.
function(tierzero_add_python_module tierzero_source)
  set(here ${tierzero_source}/integrations/python)
  # NO_EXTRAS: no link-time optimisation (the library's objects are not LTO objects; it would only
  # slow the link).
  pybind11_add_module(_tierzero NO_EXTRAS
    ${here}/src/module.cpp
    ${here}/src/errors.cpp
    ${here}/src/train_binding.cpp
    ${here}/src/estimate_binding.cpp
    ${here}/src/plan_binding.cpp
    ${here}/src/files_binding.cpp
    ${here}/src/dlpack_view.cpp
    ${here}/src/in_place_adamw.cpp
    ${here}/src/in_place_nvme_adamw.cpp
    ${here}/src/offload_adamw.cpp
    ${here}/src/offload_adamw_binding.cpp
    # What tierzero.estimate shares with `tierzero estimate` (the CLI's model and report builders).
    ${tierzero_source}/src/cli/estimate_model.cpp
    ${tierzero_source}/src/cli/estimate_report.cpp
    # What tierzero.plan shares with `tierzero plan` (its report builder and kernel timings).
    ${tierzero_source}/src/cli/plan_report.cpp
    ${tierzero_source}/src/cli/plan_kernel_times.cpp)
  target_link_libraries(_tierzero PRIVATE tz_train CLI11::CLI11)  # CLI11: estimate_model's flags
  target_include_directories(_tierzero PRIVATE ${tierzero_source}/src ${here}/src)
  target_compile_options(_tierzero PRIVATE -Wall -Wextra -Wshadow -Wconversion
                                           -Wno-sign-conversion)
  if(TIERZERO_WERROR)
    target_compile_options(_tierzero PRIVATE -Werror)
  endif()
  if(TIERZERO_NATIVE)
    target_compile_options(_tierzero PRIVATE -march=native)
  endif()
endfunction()
