// A bound on every single allocation of the test process: operator new/new[] (all forms) and,
// outside sanitizer builds, malloc/calloc/realloc are replaced by versions that print what was
// being done and abort when one request exceeds the limit, or when all that operator new holds
// at once does. A reader that sizes memory from a forged header then fails the test at once,
// naming the case, instead of being killed by the kernel later.
#pragma once

#include <cstddef>
#include <string>

namespace tierzero::test {

constexpr size_t kAllocationLimit = size_t{256} << 20;  // 256 MiB, one request
// All that operator new holds at once: many small allocations sized from a forged count (a
// billion layers' tensor tables) must fail the test too, not exhaust the machine.
constexpr size_t kLiveLimit = size_t{1} << 30;  // 1 GiB

// What the process is doing now (printed when the limit is exceeded), e.g. the fuzz case.
void set_allocation_context(const std::string& what);
// The largest single request seen since the last reset.
size_t largest_allocation();
void reset_largest_allocation();

}  // namespace tierzero::test
