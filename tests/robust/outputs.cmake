# Issue 28, outputs and start-up checks: outputs never overwrite inputs or checkpoints, are
# written whole (temporary + rename), are checked before any training step, --save is rescued
# when it fails at the end, prepare-data never leaves stale shards; and estimate / plan answer
# absurd model sizes at once.
tierzero_test(test_outputs
  SOURCES robust/test_outputs.cpp
  LIBS tz_train
  TIMEOUT 600)
add_dependencies(test_outputs tierzero)
tierzero_test(test_balanced_cut
  SOURCES robust/test_balanced_cut.cpp
  LIBS tz_nn
  TIMEOUT 300)

# Absurd sizes: 100k blocks through estimate (every stage and offload option), and a model of
# about 1e15 parameters through plan with NVMe. They used to take minutes (a quadratic walk over
# the blocks; a loop per NVMe chunk); the TIMEOUT is generous for a loaded machine, the time is
# not asserted.
add_test(NAME estimate_hundred_thousand_layers
         COMMAND $<TARGET_FILE:tierzero> estimate --layers 100000 --channels 64 --heads 4
                 --stage 3 --json)
set_tests_properties(estimate_hundred_thousand_layers PROPERTIES TIMEOUT 120 LABELS "cli")
add_test(NAME plan_quadrillion_parameters_with_nvme
         COMMAND $<TARGET_FILE:tierzero> plan --layers 10000 --channels 91288 --heads 8
                 --device-mem 80GiB --host-mem 1TiB --nvme 1000000TiB
                 --calibration ${CMAKE_CURRENT_SOURCE_DIR}/robust/fixed_rates.json)
# It answers: a choice, or (on these budgets) that nothing fits, as one clear line.
set_tests_properties(plan_quadrillion_parameters_with_nvme PROPERTIES
                     TIMEOUT 120 LABELS "cli"
                     PASS_REGULAR_EXPRESSION "chosen |no configuration of this model fits")
