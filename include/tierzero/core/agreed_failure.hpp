// AgreedFailure: a failure that every rank of a job found together, after agreeing on it
// collectively (e.g. an output path checked at start-up). No rank is left inside a collective, so
// it unwinds normally (MPI finalises) instead of aborting the job, and only the rank that
// reports() prints it, so the error appears once. Not a tierzero::Error, so the trainer's
// abort-on-Error path lets it through to main().
#pragma once

#include <stdexcept>
#include <string>

namespace tierzero {

class AgreedFailure : public std::runtime_error {
 public:
  AgreedFailure(const std::string& message, bool reports)
      : std::runtime_error(message), reports_(reports) {}
  bool reports() const { return reports_; }

 private:
  bool reports_;
};

}  // namespace tierzero
