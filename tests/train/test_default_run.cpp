// The default run (tierzero train with no arguments) learns: its validation loss ends well below
// the unigram entropy of the built-in corpus, i.e. it uses context, not just token frequencies.
#include <gtest/gtest.h>

#include <cmath>

#include "tierzero/train/train_config.hpp"
#include "tierzero/train/trainer.hpp"

using namespace tierzero;

TEST(DefaultRun, LossFallsWellBelowTheUnigramEntropy) {
  train::TrainConfig c = train::TrainConfig::defaults();
  train::Trainer trainer(c);
  train::TrainResult r = trainer.run(stdout);
  ASSERT_EQ(r.steps.size(), static_cast<size_t>(c.steps));
  ASSERT_TRUE(std::isfinite(r.unigram_entropy));
  std::printf("first loss %.4f, val loss %.4f, unigram entropy %.4f nats (ratio %.3f)\n",
              r.steps.front().loss, r.val_loss, r.unigram_entropy, r.val_loss / r.unigram_entropy);
  EXPECT_GT(r.steps.front().loss, r.unigram_entropy) << "an untrained model knows nothing";
  EXPECT_LT(r.val_loss, 0.6 * r.unigram_entropy);
}
