# Issue 28, the input readers: each class of hostile input refused with a clear Error
# (test_reader_errors), seeded fuzzing of every reader under a 256 MiB per-allocation guard
# (test_reader_fuzz; TIERZERO_FUZZ_SEED / _CASES / _CASE reproduce a case), and the refusals
# through the real binary (test_reader_cli). None needs MPI, so the sanitizer pass runs them.
tierzero_test(test_readers_robust
  SOURCES robust/test_reader_errors.cpp robust/test_reader_fuzz.cpp robust/test_alloc_guard.cpp
          robust/alloc_guard.cpp
          robust/mutator.cpp robust/reader_seeds.cpp profile/synthetic_profile.cpp
  LIBS tz_train tz_profile
  TIMEOUT 240)
target_include_directories(test_readers_robust PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/profile)

tierzero_test(test_readers_cli
  SOURCES robust/test_reader_cli.cpp
  LIBS tz_train
  TIMEOUT 300)
add_dependencies(test_readers_cli tierzero)
