// A bound on every single allocation of the test process: operator new/new[] (all forms) and,
// outside sanitizer builds, malloc/calloc/realloc are replaced by versions that print what was
// being done and abort when one request exceeds the limit. A reader that sizes a buffer from a
// forged header then fails the test at once, instead of being killed by the kernel later.
#pragma once

#include <cstddef>
#include <string>

namespace tierzero::test {

constexpr size_t kAllocationLimit = size_t{256} << 20;  // 256 MiB

// What the process is doing now (printed when the limit is exceeded), e.g. the fuzz case.
void set_allocation_context(const std::string& what);
// The largest single request seen since the last reset.
size_t largest_allocation();
void reset_largest_allocation();

}  // namespace tierzero::test
