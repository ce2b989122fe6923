# The one home of config -> placement (issue 29): tier names, the per-node host budget split, the
# NVMe bounce buffers, the trainer's and the estimator's placement from one config, and the plan's
# host budget against the trainer's.
tierzero_test(test_placement
  SOURCES placement/test_placement.cpp
  LIBS tz_train TIMEOUT 120)
add_dependencies(test_placement tierzero)
