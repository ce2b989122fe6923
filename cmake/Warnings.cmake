# Compiler flags shared by every TierZero target: warnings (errors in CI), sanitizers, tuning.
set(TZ_CXX_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Wunused -Woverloaded-virtual -Wconversion -Wno-sign-conversion
    -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
# GCC 12 reports false -Wrestrict warnings inside std::string concatenation (GCC bug 105329).
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  list(APPEND TZ_CXX_WARNINGS -Wno-restrict)
endif()
if(TIERZERO_WERROR)
  list(APPEND TZ_CXX_WARNINGS -Werror)
endif()

set(TZ_SANITIZE_FLAGS "")
if(TIERZERO_SANITIZE)
  set(TZ_SANITIZE_FLAGS -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
endif()

# Applies TierZero's C++ flags to a target.
function(tierzero_cxx_target target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TZ_CXX_WARNINGS}>)
  if(TIERZERO_NATIVE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
  endif()
  # Position-independent objects (the ci preset, for the Python module) would otherwise let GCC
  # assume any global function may be interposed at load time and stop inlining it, which changes
  # both speed and roundoff (fused multiply-adds) from the non-PIC build; nothing of ours is
  # meant to be interposed.
  if(CMAKE_POSITION_INDEPENDENT_CODE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
  endif()
  if(TIERZERO_SANITIZE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TZ_SANITIZE_FLAGS}>)
    target_link_options(${target} PRIVATE ${TZ_SANITIZE_FLAGS})
  endif()
endfunction()

# CUDA warnings become errors too when TIERZERO_WERROR is on.
set(TZ_CUDA_FLAGS --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra)
if(TIERZERO_WERROR)
  list(APPEND TZ_CUDA_FLAGS -Werror=all-warnings -Xcompiler=-Werror)
endif()
