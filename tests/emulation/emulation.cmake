# The CUDA kernels' logic run on the CPU in every test run: each script extracts kernels from
# kernels/cuda, compiles them with g++ under the host emulation of CUDA's threads, barriers and
# shuffles (scripts/device/emulate) and checks them against the unfused or per-call kernels' bits,
# a double reference, and the same bits with blocks run in a shuffled order. CI has no GPU, so this
# is where a change to a CUDA kernel first runs; the real GPU runs the same kernels through the
# `cuda` tests (scripts/device/gpu_check.sh). Without g++ they are not registered.
find_program(TIERZERO_EMULATION_GXX g++)
if(TIERZERO_EMULATION_GXX)
  foreach(check adamw flash_attention gradient_sums layernorm)
    add_test(NAME cuda_emulation_${check}
             COMMAND ${PROJECT_SOURCE_DIR}/scripts/device/emulate_${check}.sh)
    set_tests_properties(cuda_emulation_${check} PROPERTIES LABELS "emulation" TIMEOUT 900)
  endforeach()
  # The attention's emulation runs 256 threads per block for about a minute: it takes both of
  # CI's cores, so that the multi-rank tests' deadlines never run beside it.
  set_tests_properties(cuda_emulation_flash_attention PROPERTIES PROCESSORS 2)
endif()
