# TIERZERO_PYTHON: the Python package's extension module (_tierzero) built by the project's own
# build, from the same objects as the tests, into <build>/python/. AUTO builds it when the build is
# position-independent (the ci preset) and Python's headers and pybind11 (python3-dev,
# pybind11-dev) are found; scripts/test_python.sh then installs that file with pip instead of
# building the library again. `pip install integrations/python` alone still builds everything.
set(TIERZERO_PYTHON "AUTO" CACHE STRING "Build the Python extension module: AUTO, ON, OFF")
set_property(CACHE TIERZERO_PYTHON PROPERTY STRINGS AUTO ON OFF)

set(tz_python_why "")
if(TIERZERO_PYTHON STREQUAL "OFF")
  return()
elseif(NOT CMAKE_POSITION_INDEPENDENT_CODE)
  set(tz_python_why "the build is not position-independent (CMAKE_POSITION_INDEPENDENT_CODE)")
elseif(TIERZERO_SANITIZE)
  set(tz_python_why "a sanitizer build cannot be loaded into an uninstrumented interpreter")
else()
  find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
  find_package(pybind11 2.6 CONFIG QUIET)
  if(NOT Python_Development.Module_FOUND)
    set(tz_python_why "Python's headers were not found (python3-dev)")
  elseif(NOT pybind11_FOUND)
    set(tz_python_why "pybind11 was not found (pybind11-dev)")
  endif()
endif()

if(tz_python_why)
  if(TIERZERO_PYTHON STREQUAL "ON")
    message(FATAL_ERROR "TIERZERO_PYTHON=ON but ${tz_python_why}")
  endif()
  message(STATUS "TierZero: Python module OFF (${tz_python_why})")
  return()
endif()

include(${PROJECT_SOURCE_DIR}/integrations/python/module.cmake)
tierzero_add_python_module(${PROJECT_SOURCE_DIR})
set_target_properties(_tierzero PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/python)
message(STATUS "TierZero: Python module ON (${Python_EXECUTABLE}, ${Python_SOABI})")
