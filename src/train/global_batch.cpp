// train_batch_size against the micro-batch, the accumulation and the data-parallel ranks
// (global_batch.hpp).
#include "tierzero/train/global_batch.hpp"

#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

namespace {

// "train_batch_size 8 = train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 1 x 2
// data-parallel ranks" with the given values in place.
std::string equation(int64_t global, const std::string& micro, const std::string& accumulation,
                     int64_t dp_size) {
  return "train_batch_size " + std::to_string(global) + " = train_micro_batch_size_per_gpu " +
         micro + " x gradient_accumulation_steps " + accumulation + " x " +
         std::to_string(dp_size) + " data-parallel rank(s)";
}

// global / (a x dp_size) when whole and positive; Error showing the equation otherwise.
int64_t quotient(int64_t global, int64_t a, int64_t dp_size, const std::string& equation_text) {
  const int64_t d = a * dp_size;
  TZ_CHECK(d > 0 && global % d == 0 && global / d >= 1, equation_text + " has no whole solution",
           "give a train_batch_size that is a multiple of the other factors and the ranks "
           "(mpiexec -n; estimate and plan: --ranks), or leave it out (it is derived)");
  return global / d;
}

}  // namespace

void resolve_global_batch(TrainConfig& c, int64_t dp_size) {
  const int64_t global = c.train_batch_size;
  if (global == 0 || dp_size <= 0) return;
  const std::string micro = std::to_string(c.micro_batch_size);
  const std::string accumulation = std::to_string(c.gradient_accumulation_steps);
  if (c.micro_batch_given && c.accumulation_given) {
    // (Compared per rank: micro x accumulation is at most 2^40, the whole product could pass 2^63.)
    const int64_t per_rank = c.micro_batch_size * c.gradient_accumulation_steps;
    TZ_CHECK(global % dp_size == 0 && global / dp_size == per_rank,
             equation(global, micro, accumulation, dp_size) + " does not hold (" +
                 std::to_string(per_rank) + " sequences per rank x " + std::to_string(dp_size) +
                 " ranks)",
             "launch the rank count the config was written for (mpiexec -n; estimate and plan: "
             "--ranks), or leave one of the three out of the config (it is derived)");
  } else if (c.micro_batch_given) {
    c.gradient_accumulation_steps =
        quotient(global, c.micro_batch_size, dp_size, equation(global, micro, "?", dp_size));
  } else if (c.accumulation_given) {
    c.micro_batch_size = quotient(global, c.gradient_accumulation_steps, dp_size,
                                  equation(global, "?", accumulation, dp_size));
  } else {
    c.gradient_accumulation_steps = 1;
    c.micro_batch_size = quotient(global, 1, dp_size, equation(global, "?", "1", dp_size));
  }
  // The limits the config holds each of them to.
  constexpr int64_t kMost = int64_t{1} << 20;
  TZ_CHECK(c.micro_batch_size <= kMost && c.gradient_accumulation_steps <= kMost,
           "train_batch_size " + std::to_string(global) + " makes train_micro_batch_size_per_gpu " +
               std::to_string(c.micro_batch_size) + " and gradient_accumulation_steps " +
               std::to_string(c.gradient_accumulation_steps) + ": one is above " +
               std::to_string(kMost),
           "give the micro-batch or the accumulation too");
}

}  // namespace tierzero::train
