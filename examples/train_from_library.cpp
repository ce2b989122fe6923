// Trains the default small GPT on the built-in corpus through the library API: the minimal
// program to copy when embedding TierZero in another tool.
#include <cstdio>

#include "tierzero/core/error.hpp"
#include "tierzero/train/train_config.hpp"
#include "tierzero/train/trainer.hpp"

int main() {
  try {
    tierzero::train::TrainConfig config = tierzero::train::TrainConfig::parse(
        R"({"train_micro_batch_size_per_gpu": 4, "tierzero": {"steps": 20}})", "example");
    tierzero::train::Trainer trainer(config);
    tierzero::train::TrainResult result = trainer.run(stderr);
    std::printf("final loss %.4f, validation loss %.4f\n", result.steps.back().loss,
                result.val_loss);
    return 0;
  } catch (const tierzero::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
