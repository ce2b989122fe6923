# Training checkpoints against hostile files (issue 28): partial checkpoints, forged fields,
# rotation, the save directory's lock (test_checkpoint_robust); a seeded fuzz of every checkpoint
# reader with bounded allocations (test_checkpoint_fuzz: TIERZERO_FUZZ_SEED reproduces a run);
# the same end to end with the real binary, on one rank and on 2 (run_ckpt_robust.sh).
tierzero_test(test_checkpoint_robust SOURCES train/test_checkpoint_robust.cpp LIBS tz_train)
# The allocation guard and the byte mutator are the readers' (tests/robust), shared.
tierzero_test(test_checkpoint_fuzz
  SOURCES train/test_checkpoint_fuzz.cpp robust/alloc_guard.cpp robust/mutator.cpp
  LIBS tz_train
  TIMEOUT 240)
target_include_directories(test_checkpoint_fuzz PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/robust)
foreach(mode one mpi)
  add_test(NAME train_checkpoint_robust_${mode}
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/train/run_ckpt_robust.sh $<TARGET_FILE:tierzero>
                   ${mode} ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
  # One rank needs no MPI (the sanitizer build runs it too).
  set(labels "train;mpi")
  if(mode STREQUAL "one")
    set(labels "train")
  endif()
  set_tests_properties(train_checkpoint_robust_${mode} PROPERTIES
                       TIMEOUT 400 LABELS "${labels}" RESOURCE_LOCK mpi_ranks
                       ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
endforeach()
