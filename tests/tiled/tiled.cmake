# Issue 31: the CPU's tiled attention (no T^2 buffer) against the naive kernel it replaced, and
# selective recompute (attention's core only) against none and full.
tierzero_test(test_tiled_attention
  SOURCES tiled/test_tiled_attention.cpp
  LIBS tz_kernels)
tierzero_test(test_recompute
  SOURCES tiled/test_recompute.cpp
  LIBS tz_train tz_nn)
target_include_directories(test_recompute PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/nn)
# End to end at one rank, at tensor_parallel 2 and at ulysses 2, and in 16-bit compute at one
# and two ranks, at tensor_parallel 2 with and without sequence parallelism and at ulysses 2
# (issue 26), also for the Llama family: none, selective and full train bit for bit the same, and
# each activation peak is the estimate's. Fields: ranks, tp, ulysses, tag, compute, sequence
# parallelism, architecture.
foreach(case "1;1;1;np1;fp32;false;gpt2" "2;2;1;np2_tp2;fp32;false;gpt2"
             "2;1;2;np2_ulysses2;fp32;false;gpt2" "1;1;1;np1_bf16_compute;bf16;false;gpt2"
             "2;1;1;np2_bf16_compute;bf16;false;gpt2" "2;2;1;np2_tp2_bf16_compute;bf16;false;gpt2"
             "2;2;1;np2_tp2_sp_bf16_compute;bf16;true;gpt2"
             "2;1;2;np2_ulysses2_bf16_compute;bf16;false;gpt2"
             "1;1;1;np1_llama_bf16_compute;bf16;false;llama"
             "2;2;1;np2_tp2_sp_llama_bf16_compute;bf16;true;llama"
             "2;1;2;np2_ulysses2_llama_bf16_compute;bf16;false;llama")
  list(GET case 0 ranks)
  list(GET case 1 tp)
  list(GET case 2 ulysses)
  list(GET case 3 tag)
  list(GET case 4 compute)
  list(GET case 5 sp)
  list(GET case 6 arch)
  add_test(NAME train_recompute_modes_match_${tag}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/tiled/run_recompute_match.sh
                   $<TARGET_FILE:tierzero> ${ranks} ${tp} ${ulysses} ${compute} ${sp} ${arch}
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set_tests_properties(train_recompute_modes_match_${tag} PROPERTIES
                       TIMEOUT 400 LABELS "train;mpi" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
endforeach()
