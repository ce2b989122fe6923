# The estimator and planner's tests (included from tests/profile/CMakeLists.txt; kept in their own
# file so the profile recorder's tests sit beside them without merge conflicts).
tierzero_test(test_estimator
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_estimator.cpp ${CMAKE_CURRENT_LIST_DIR}/test_planner.cpp
  LIBS tz_estimate tz_train TIMEOUT 120)
tierzero_test(test_estimate_cli
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_estimate_cli.cpp
  LIBS tz_train TIMEOUT 120)
add_dependencies(test_estimate_cli tierzero)

# Estimator against measurement (issue 6): every stage and placement of a small GPT on 1, 2 and 4
# ranks, `tierzero train --memory-json` against `tierzero estimate --json`. Needs the store's
# offload support and train's --memory-json, which the integrator adds; until then these fail.
set(TZ_ESTIMATE_MPI_ENV
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader
  TIERZERO_COMM_TIMEOUT_S=30 OMP_NUM_THREADS=1)
add_executable(estimate_match_check ${CMAKE_CURRENT_LIST_DIR}/estimate_match_check.cpp)
target_link_libraries(estimate_match_check PRIVATE nlohmann_json::nlohmann_json)
tierzero_cxx_target(estimate_match_check)
foreach(n 1 2 4)
  add_test(NAME estimate_matches_train_np${n}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_estimate_match.sh $<TARGET_FILE:tierzero>
                   $<TARGET_FILE:estimate_match_check> ${n}
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set_tests_properties(estimate_matches_train_np${n} PROPERTIES
                       TIMEOUT 600 LABELS "mpi;zero" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "${TZ_ESTIMATE_MPI_ENV}")
endforeach()

# With bf16 reductions on 2 ranks: MPI widens them to fp32 in host staging, which the estimate
# counts (in the pinned pool's size classes where the store has a pool, which then holds it).
add_test(NAME estimate_matches_train_np2_bf16_wire
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_estimate_match.sh $<TARGET_FILE:tierzero>
                 $<TARGET_FILE:estimate_match_check> 2
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
set_tests_properties(estimate_matches_train_np2_bf16_wire PROPERTIES
                     TIMEOUT 600 LABELS "mpi;zero" RESOURCE_LOCK mpi_ranks
                     ENVIRONMENT "${TZ_ESTIMATE_MPI_ENV};TIERZERO_TEST_WIRE=bf16")

# bf16 working parameters on 2 ranks (issue 26): computed in fp32 (each unit widened while in use,
# at stage 3 as its gather lands) and in 16-bit compute (the gathered units used as they are,
# the activations in bf16).
foreach(precision bf16 bf16_compute)
  add_test(NAME estimate_matches_train_np2_${precision}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_estimate_match.sh $<TARGET_FILE:tierzero>
                   $<TARGET_FILE:estimate_match_check> 2
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set_tests_properties(estimate_matches_train_np2_${precision} PROPERTIES
                       TIMEOUT 600 LABELS "mpi;zero" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "${TZ_ESTIMATE_MPI_ENV};TIERZERO_TEST_PRECISION=${precision}")
endforeach()

# The same with tensor parallelism (issue 14): tp 2 on 2 ranks, and tp 2 x dp 2 with sequence
# parallelism on 4; the estimate takes each rank's real layout and activation extents.
foreach(tp_case "2;2;false" "4;2;true")
  list(GET tp_case 0 n)
  list(GET tp_case 1 tp)
  list(GET tp_case 2 sp)
  set(name estimate_matches_train_np${n}_tp${tp})
  if(sp)
    set(name ${name}_sp)
  endif()
  add_test(NAME ${name}
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_estimate_match.sh $<TARGET_FILE:tierzero>
                   $<TARGET_FILE:estimate_match_check> ${n}
                   ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set_tests_properties(${name} PROPERTIES
                       TIMEOUT 600 LABELS "mpi;zero;tp" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT
                       "${TZ_ESTIMATE_MPI_ENV};TIERZERO_TEST_TP=${tp};TIERZERO_TEST_SP=${sp}")
endforeach()

# The planner's choice fits when run: plan for a small device budget, then train 3 steps with the
# device allocator enforcing that budget (train's --device-mem, added by the integrator).
add_test(NAME plan_choice_fits_when_trained
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_plan_fits.sh $<TARGET_FILE:tierzero>)
set_tests_properties(plan_choice_fits_when_trained PROPERTIES
                     TIMEOUT 300 LABELS "zero;mpi" ENVIRONMENT "OMP_NUM_THREADS=1")
# The same with bf16 working parameters (the CPU computes in fp32: their working copy and its
# widening are the bytes the plan has to count).
add_test(NAME plan_choice_fits_when_trained_bf16
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_plan_fits.sh $<TARGET_FILE:tierzero> bf16)
set_tests_properties(plan_choice_fits_when_trained_bf16 PROPERTIES
                     TIMEOUT 300 LABELS "zero;mpi" ENVIRONMENT "OMP_NUM_THREADS=1")

# The planner's predicted step time against a measured run (issue 19): a small GPT on one CPU
# thread, within the tolerance the script states (both sides timed as on an idle machine). Not in
# the sanitizer build: ASan instruments our kernels (the tiled attention, GELU) but not OpenBLAS's
# GEMMs, so the time model's split no longer describes the binary (seen: -24% to -30% there, while
# the ci build holds the tolerance).
if(NOT TIERZERO_SANITIZE)
  add_test(NAME plan_step_time_matches_run
           COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_plan_time.sh $<TARGET_FILE:tierzero>)
  set_tests_properties(plan_step_time_matches_run PROPERTIES
                       TIMEOUT 600 LABELS "profile" ENVIRONMENT "OMP_NUM_THREADS=1")
endif()

# The planner's kernel timing in each compute dtype (it is the binary's; compiled in here).
tierzero_test(test_plan_kernel_times
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_plan_kernel_times.cpp
          ${PROJECT_SOURCE_DIR}/src/cli/plan_kernel_times.cpp
  LIBS tz_estimate tz_profile tz_nn tz_device tz_kernels TIMEOUT 120)
target_include_directories(test_plan_kernel_times PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
