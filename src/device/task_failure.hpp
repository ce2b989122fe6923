// How a host task's exception is kept for later (internal to the device layer): as a shared
// tierzero::Error, so that whoever reports it (Stream::synchronize, an event carrying it) throws
// its own copy with the original message. Shared by the CPU worker streams and CUDA host tasks.
#pragma once

#include <exception>
#include <memory>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::device_detail {

using TaskFailure = std::shared_ptr<const Error>;

// `error` as an Error; never throws (it runs where nothing may escape: a worker thread, a CUDA
// host callback).
inline TaskFailure capture_task_failure(std::exception_ptr error) noexcept {
  try {
    try {
      std::rethrow_exception(std::move(error));
    } catch (const Error& e) {
      return std::make_shared<const Error>(e);
    } catch (const std::exception& e) {
      return std::make_shared<const Error>(
          std::string("a host task on a stream failed: ") + e.what(),
          error_location(__FILE__, __LINE__, "device"),
          "later work on that stream was skipped; the message above says what failed");
    } catch (...) {
      return std::make_shared<const Error>(
          "a host task on a stream failed with an exception that is not a std::exception",
          error_location(__FILE__, __LINE__, "device"), "later work on that stream was skipped");
    }
  } catch (...) {
    // Only building the Error can get here (out of memory); the stream must still count as
    // failed, so fall back to one made in advance.
    static const TaskFailure fallback = std::make_shared<const Error>(
        "a host task on a stream failed (its message was lost: out of memory)", "task_failure.hpp",
        "later work on that stream was skipped");
    return fallback;
  }
}

}  // namespace tierzero::device_detail
