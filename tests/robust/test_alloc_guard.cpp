// The allocation guard the readers' tests rely on is not a no-op: a request above its limit,
// through operator new or (outside sanitizer builds) malloc, or too much held at once through
// operator new, ends the process naming the context.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>

#include "alloc_guard.hpp"

namespace tierzero::test {
namespace {

void* volatile g_keep = nullptr;  // so the compiler cannot drop the allocations

TEST(AllocationGuard, HugeRequestsEndTheTestNamingTheContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  volatile size_t huge = kAllocationLimit + 1;
  EXPECT_DEATH(
      {
        set_allocation_context("the guard's own test");
        g_keep = ::operator new(huge);
      },
      "ALLOCATION GUARD.*the guard's own test");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && defined(__GLIBC__)
  EXPECT_DEATH(
      {
        set_allocation_context("malloc");
        g_keep = std::malloc(huge);
      },
      "ALLOCATION GUARD.*malloc");
#endif
  // Many requests each under the limit, together over what may be held at once.
  EXPECT_DEATH(
      {
        set_allocation_context("many small");
        for (size_t i = 0; i < 2 * kLiveLimit / (size_t{64} << 20); ++i)
          g_keep = ::operator new (size_t{64} << 20);
      },
      "ALLOCATION GUARD: the live heap.*many small");
  // Below the limits all is as usual.
  void* p = ::operator new (size_t{1} << 20);
  g_keep = p;
  ::operator delete(p);
  EXPECT_GE(largest_allocation(), size_t{1} << 20);
}

}  // namespace
}  // namespace tierzero::test
