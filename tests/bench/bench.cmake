# The benchmark library run in-process (issue 29): crc, adam and a tiny io bench on tiny sizes; the
# result structs and their JSON lines are checked for consistency (bytes counted equal bytes
# asked, rates positive and finite, the ceiling measured), never for timings.
tierzero_test(test_bench_library
  SOURCES bench/test_bench_library.cpp
  LIBS tz_bench TIMEOUT 120)
