# The Llama family (issue 30): parity of the modules with Hugging Face transformers at one rank
# (test_llama), and `tierzero train` on the Llama modules under every parallelism against the
# one-rank run (run_llama_match.sh).
tierzero_test(test_llama
  SOURCES llama/test_llama_parity.cpp reference/fixture_reader.cpp
  LIBS tz_train tz_nn)
target_include_directories(test_llama PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/reference)
target_compile_definitions(test_llama PRIVATE TIERZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")

# tz_llama_match(name mode tol compute): run_llama_match.sh in `mode`, both runs in `compute`.
function(tz_llama_match name mode tol compute)
  add_test(NAME ${name}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/llama/run_llama_match.sh $<TARGET_FILE:tierzero>
                   ${mode} ${tol} ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set_tests_properties(${name} PROPERTIES
                       TIMEOUT 600 LABELS "llama;mpi" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "TZ_COMPUTE=${compute};OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
endfunction()

foreach(mode tp2 pp2 ulysses2 zero3_nvme zero3_host_ckpt tp4_refused resume_zero3_nvme)
  tz_llama_match(train_llama_${mode}_matches_one_rank ${mode} 1e-5 fp32)
endforeach()

# 16-bit compute (issue 26): RMSNorm, rotary positions, SwiGLU and the grouped attention in bf16,
# each parallel run against the one-rank run in the same compute. The tolerance is bf16's
# rounding (2^-8): the first step's gradient norm agrees to 3e-8, later steps drift apart by
# Adam's amplification of differently rounded sums, at most 2.9e-3 measured (tp 2 + SP).
foreach(mode tp2 pp2 ulysses2 zero3_host_ckpt)
  tz_llama_match(train_llama_${mode}_bf16_compute_matches_one_rank ${mode} 1e-2 bf16)
endforeach()

# The Llama kernels on every backend (the CUDA cases skip where there is no GPU).
add_executable(test_llama_kernels llama/test_llama_kernels.cpp kernels/kernel_test_support.cpp)
target_include_directories(test_llama_kernels PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kernels)
target_link_libraries(test_llama_kernels PRIVATE tz_device tz_kernels GTest::gtest_main)
tierzero_cxx_target(test_llama_kernels)
gtest_discover_tests(test_llama_kernels DISCOVERY_TIMEOUT 120)
