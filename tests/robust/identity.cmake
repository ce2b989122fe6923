# Issue 28: ranks launched with different settings refuse at start-up, naming the first
# differing setting. The settings list and its comparison without MPI; then the real binary on
# 2 ranks launched differently (MPMD --steps, a config file per rank, eval --batches, data of
# other sizes), and ranks that differ only per node still training (run_identity.sh).
tierzero_test(test_run_settings SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_run_settings.cpp
              LIBS tz_train TIMEOUT 60)
add_test(NAME train_ranks_with_other_settings_refuse
         COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_identity.sh $<TARGET_FILE:tierzero>
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
set_tests_properties(train_ranks_with_other_settings_refuse PROPERTIES
                     TIMEOUT 600 LABELS "train;mpi" RESOURCE_LOCK mpi_ranks
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
