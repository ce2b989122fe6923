# Issue 31: the CPU's tiled attention (no T^2 buffer) against the naive kernel it replaced, and
# selective recompute (attention's core only) against none and full.
tierzero_test(test_tiled_attention
  SOURCES tiled/test_tiled_attention.cpp
  LIBS tz_kernels)
