# Training checkpoints against hostile files (issue 28): partial checkpoints, forged fields,
# rotation, the save directory's lock (test_checkpoint_robust); a seeded fuzz of every checkpoint
# reader with bounded allocations (test_checkpoint_fuzz: TIERZERO_FUZZ_SEED reproduces a run);
# the same end to end with the real binary, on one rank and on 2 (run_ckpt_robust.sh).
tierzero_test(test_checkpoint_robust SOURCES train/test_checkpoint_robust.cpp LIBS tz_train)
tierzero_test(test_checkpoint_fuzz SOURCES train/test_checkpoint_fuzz.cpp LIBS tz_train TIMEOUT 240)
