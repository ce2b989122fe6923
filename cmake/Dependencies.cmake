# Finds TierZero's dependencies (all from Debian packages, CUDA from /usr/local/cuda).
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
# PCRE2 (libpcre2-dev) for the byte-level BPE tokenizers' pre-tokenizer regexes (src/train).
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# ICU (libicu-dev) for the tokenizers' Unicode normalizers (NFC, ...; src/train): icu-uc has
# Normalizer2 and its data comes with it (libicudata).
pkg_check_modules(ICU REQUIRED IMPORTED_TARGET icu-uc)

# OpenBLAS: Debian installs it as the BLAS alternative; cblas.h comes with libopenblas-dev.
find_library(OPENBLAS_LIBRARY NAMES openblas REQUIRED)
find_path(OPENBLAS_INCLUDE_DIR NAMES cblas.h PATH_SUFFIXES openblas openblas-pthread REQUIRED)
add_library(tz_openblas INTERFACE)
target_link_libraries(tz_openblas INTERFACE ${OPENBLAS_LIBRARY})
target_include_directories(tz_openblas SYSTEM INTERFACE ${OPENBLAS_INCLUDE_DIR})

# ISA-L (libisal-dev, scripts/setup.sh installs it): its CRC32C checks the NVMe swap and the
# checkpoints (`tierzero bench crc` measured it at least as fast as ours). Optional: without it
# TierZero's own CRC32C kernels are used (same checksums), so a machine that cannot install it
# still builds.
find_library(ISAL_LIBRARY NAMES isal)
find_path(ISAL_INCLUDE_DIR NAMES isa-l/crc.h)
set(TZ_HAVE_ISAL OFF)
if(ISAL_LIBRARY AND ISAL_INCLUDE_DIR)
  set(TZ_HAVE_ISAL ON)
  message(STATUS "TierZero: CRC32C from ISA-L (${ISAL_LIBRARY})")
else()
  message(STATUS "TierZero: ISA-L not found (libisal-dev): CRC32C from TierZero's own kernels")
endif()

# CUDA: built whenever nvcc is found (AUTO), so CI catches CUDA compile errors without a GPU.
set(TZ_HAVE_CUDA OFF)
if(NOT TIERZERO_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; tell it.
    if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION OR CMAKE_CUDA20_STANDARD_COMPILE_OPTION STREQUAL "")
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_COMPILE_FEATURES cuda_std_20)
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
    endif()
    # One CUDA runtime (the shared one that CUDA::cudart brings), not a static copy as well.
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TZ_HAVE_CUDA ON)
    message(STATUS "TierZero: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, sm ${CMAKE_CUDA_ARCHITECTURES})")
  elseif(TIERZERO_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TIERZERO_CUDA=ON but no CUDA compiler was found")
  else()
    message(STATUS "TierZero: CUDA backend OFF (no nvcc found)")
  endif()
endif()
