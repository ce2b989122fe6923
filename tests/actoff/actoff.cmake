# Activation checkpoints on a tier (issue 31): the model with its checkpoints in pinned host
# memory and on NVMe against the device (bitwise), the device peak against the prediction, a
# damaged activation swap file (test_actoff); the same end to end with the real binary for every
# parallelism (run_actoff.sh).
tierzero_test(test_actoff SOURCES actoff/test_actoff.cpp LIBS tz_train tz_nn)
target_include_directories(test_actoff PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/nn)
foreach(mode one zero3 tp2 pp2 ulysses2 budget)
  add_test(NAME actoff_${mode}_matches_device
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/actoff/run_actoff.sh $<TARGET_FILE:tierzero>
                   ${mode} ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  set(labels "train;mpi")
  if(mode STREQUAL "one" OR mode STREQUAL "budget")
    set(labels "train")
  endif()
  set_tests_properties(actoff_${mode}_matches_device PROPERTIES
                       TIMEOUT 600 LABELS "${labels}" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
endforeach()
# The estimator against the tracker with the checkpoints on each tier (one rank, tp 2 + SP, pp 2).
add_test(NAME actoff_estimate_matches_train
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/actoff/run_actoff_estimate.sh
                 $<TARGET_FILE:tierzero> ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
set_tests_properties(actoff_estimate_matches_train PROPERTIES
                     TIMEOUT 600 LABELS "train;mpi;zero" RESOURCE_LOCK mpi_ranks
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
