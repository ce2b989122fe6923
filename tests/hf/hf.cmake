# Hugging Face model directories (issue 30): the reader and writer in-process (test_hf_directory)
# and end to end with the binary: train, export --hf-dir in bf16, fp16 and fp32 with several
# shards, --load the directory on one rank and by range on 2 ranks at ZeRO-3 (run_hf_roundtrip.sh).
tierzero_test(test_hf_directory
  SOURCES hf/test_hf_directory.cpp
  LIBS tz_train TIMEOUT 120)
# The Llama family's tables against h-llama's fixtures (tests/data/llama).
tierzero_test(test_hf_llama_directory
  SOURCES hf/test_hf_llama_directory.cpp reference/fixture_reader.cpp
  LIBS tz_train TIMEOUT 120)
target_include_directories(test_hf_llama_directory PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/reference)
target_compile_definitions(test_hf_llama_directory PRIVATE
                           TIERZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_test(NAME train_hf_directory_round_trip
         COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/hf/run_hf_roundtrip.sh $<TARGET_FILE:tierzero>
                 ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none)
set_tests_properties(train_hf_directory_round_trip PROPERTIES
                     TIMEOUT 300 LABELS "train;mpi" RESOURCE_LOCK mpi_ranks
                     ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;OMPI_MCA_btl=self,vader;TIERZERO_COMM_TIMEOUT_S=30;OMP_NUM_THREADS=1")
# estimate --hf-config: a config.json alone sizes its model (the Llama fixture's).
tierzero_test(test_hf_config_cli
  SOURCES hf/test_hf_config_cli.cpp
  LIBS tz_core TIMEOUT 120)
target_compile_definitions(test_hf_config_cli PRIVATE TIERZERO_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(test_hf_config_cli tierzero)
