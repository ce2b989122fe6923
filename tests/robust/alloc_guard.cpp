// The replaced global allocation functions (see alloc_guard.hpp).
#include "alloc_guard.hpp"

#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tierzero::test {

namespace {
std::atomic<size_t> g_largest{0};
std::atomic<size_t> g_live{0};  // bytes held through operator new now
char g_context[512] = "(no context)";
}  // namespace

void set_allocation_context(const std::string& what) {
  std::snprintf(g_context, sizeof g_context, "%s", what.c_str());
}

size_t largest_allocation() {
  return g_largest.load();
}

void reset_largest_allocation() {
  g_largest.store(0);
}

[[noreturn]] void fail(const char* what, size_t bytes, size_t limit) {
  // No allocation here: the message goes straight to stderr.
  char msg[768];
  const int n = std::snprintf(msg, sizeof msg,
                              "\nALLOCATION GUARD: %s of %zu bytes exceeds the %zu-byte limit "
                              "while: %s\n",
                              what, bytes, limit, g_context);
  if (n > 0) std::fwrite(msg, 1, std::strlen(msg), stderr);
  std::fflush(stderr);
  std::abort();
}

void add_live(size_t bytes) {
  const size_t live = g_live.fetch_add(bytes) + bytes;
  if (live > kLiveLimit) fail("the live heap (through operator new)", live, kLiveLimit);
}

void remove_live(size_t bytes) {
  g_live.fetch_sub(bytes);
}

void check_allocation(size_t bytes) {
  size_t seen = g_largest.load(std::memory_order_relaxed);
  while (bytes > seen && !g_largest.compare_exchange_weak(seen, bytes)) {
  }
  if (bytes > kAllocationLimit) fail("a request", bytes, kAllocationLimit);
}

}  // namespace tierzero::test

using tierzero::test::add_live;
using tierzero::test::check_allocation;
using tierzero::test::remove_live;

namespace {
void* allocate(size_t n) {
  check_allocation(n);
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  add_live(::malloc_usable_size(p));
  return p;
}
void release(void* p) {
  if (p) remove_live(::malloc_usable_size(p));
  std::free(p);
}
void* allocate_aligned(size_t n, std::align_val_t a) {
  check_allocation(n);
  const auto align = static_cast<size_t>(a);
  void* p = nullptr;
  if (::posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, n ? n : 1) != 0)
    throw std::bad_alloc();
  add_live(::malloc_usable_size(p));
  return p;
}
}  // namespace

void* operator new(size_t n) {
  return allocate(n);
}
void* operator new[](size_t n) {
  return allocate(n);
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(size_t n, std::align_val_t a) {
  return allocate_aligned(n, a);
}
void* operator new[](size_t n, std::align_val_t a) {
  return allocate_aligned(n, a);
}
void operator delete(void* p) noexcept {
  release(p);
}
void operator delete[](void* p) noexcept {
  release(p);
}
void operator delete(void* p, size_t) noexcept {
  release(p);
}
void operator delete[](void* p, size_t) noexcept {
  release(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  release(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
  release(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
  release(p);
}

// The C allocator too (glibc's own entry points behind the check); sanitizers replace malloc
// themselves, so there only operator new is guarded.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && defined(__GLIBC__)
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* malloc(size_t n) {
  check_allocation(n);
  return __libc_malloc(n);
}
void* calloc(size_t count, size_t size) {
  size_t n = 0;
  if (!__builtin_mul_overflow(count, size, &n)) check_allocation(n);
  return __libc_calloc(count, size);
}
void* realloc(void* p, size_t n) {
  check_allocation(n);
  return __libc_realloc(p, n);
}
}
#endif
