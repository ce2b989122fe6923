// What the model-file readers and writers (llm.c files, safetensors) share: the walk over the
// layout tensors a flat-buffer range touches, and pread/pwrite that retry short and interrupted
// transfers. Private to src/train: the public interface is ModelRanges and the file functions.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <string>

#include "tierzero/core/error.hpp"
#include "tierzero/nn/param_layout.hpp"

namespace tierzero::train::detail {

// Calls fn(tensor index, first element in the tensor, first element in the range, elements) for
// each part of [begin, begin + count) of the flat buffer that is a tensor (alignment padding
// between tensors is skipped).
template <typename Fn>
void for_each_tensor_part(const nn::ParamLayout& layout, size_t begin, size_t count, Fn fn) {
  const size_t end = begin + count;
  for (size_t i = 0; i < layout.tensors().size(); ++i) {
    const nn::ParamTensor& t = layout.tensors()[i];
    const size_t lo = std::max(begin, t.offset), hi = std::min(end, t.offset + t.numel);
    if (lo < hi) fn(i, lo - t.offset, lo - begin, hi - lo);
  }
}

// Transfers `bytes` through op(done) (a pread or pwrite of the rest from `done` on), retrying
// short and interrupted transfers; "" when all moved, else why not.
template <typename Op>
std::string transfer_all(size_t bytes, const char* when_no_progress, Op op) {
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = op(done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_string();
    if (n == 0) return when_no_progress;
    done += static_cast<size_t>(n);
  }
  return "";
}

inline std::string pread_all(int fd, void* dst, size_t bytes, size_t offset) {
  auto* d = static_cast<char*>(dst);
  return transfer_all(bytes, "the file ended early", [&](size_t done) {
    return ::pread(fd, d + done, bytes - done, static_cast<off_t>(offset + done));
  });
}

inline std::string pwrite_all(int fd, const void* src, size_t bytes, size_t offset) {
  const auto* s = static_cast<const char*>(src);
  return transfer_all(bytes, "no progress", [&](size_t done) {
    return ::pwrite(fd, s + done, bytes - done, static_cast<off_t>(offset + done));
  });
}

}  // namespace tierzero::train::detail
