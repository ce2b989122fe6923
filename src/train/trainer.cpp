// The one-rank training loop (the fp32 reference path every later mode is compared with).
#include "tierzero/train/trainer.hpp"

#include <cmath>
#include <limits>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/byte_tokenizer.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/data_loader.hpp"
#include "tierzero/train/lr_schedule.hpp"
#include "tierzero/train/progress.hpp"
#include "tierzero/train/synthetic_corpus.hpp"

namespace tierzero::train {

namespace {

constexpr size_t kBuiltinCorpusTokens = 2000000;
constexpr size_t kBuiltinValTokens = 200000;

void check_supported(const TrainConfig& c) {
  if (c.zero.stage != 0 || c.zero.offload_param.device != "none" ||
      c.zero.offload_optimizer.device != "none")
    TZ_THROW("zero_optimization stage " + std::to_string(c.zero.stage) +
                 " / offload is not available in this build yet: the partition store is not "
                 "implemented",
             "set zero_optimization.stage to 0 and offload devices to none");
  if ((c.bf16 || c.fp16) && c.device != "cpu")
    TZ_THROW(std::string(c.bf16 ? "bf16" : "fp16") +
                 ".enabled: mixed precision is not implemented yet on CUDA",
             "set enabled to false to train in fp32");
}

}  // namespace

struct Trainer::State {
  std::unique_ptr<Device> device;
  std::unique_ptr<DeviceAllocator> allocator;
  nn::GPTConfig model_config;
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<nn::LocalParams> params;
  std::unique_ptr<AdamWOptimizer> optimizer;
  std::unique_ptr<DataLoader> train_loader;
  std::unique_ptr<DataLoader> val_loader;
  double unigram_entropy = std::numeric_limits<double>::quiet_NaN();
};

Trainer::Trainer(TrainConfig config) : config_(std::move(config)), state_(new State) {
  log::set_level(log::level_from_name(config_.log_level));
  check_supported(config_);
  State& s = *state_;
  const auto B = static_cast<size_t>(config_.micro_batch_size);
  const auto T = static_cast<size_t>(config_.seq_len);

  s.model_config = nn::GPTConfig::from_shape(config_.model);
  if (!config_.load_checkpoint.empty()) {
    s.model_config = read_checkpoint_config(config_.load_checkpoint);
    log::info("model shape from checkpoint '" + config_.load_checkpoint +
              "': " + s.model_config.str());
  }
  TZ_CHECK(T <= s.model_config.max_seq_len,
           "seq_len " + std::to_string(T) + " exceeds the model's context length " +
               std::to_string(s.model_config.max_seq_len),
           "lower tierzero.seq_len");

  // Data first: a bad path should fail before any large allocation.
  const size_t V = s.model_config.vocab_size;
  if (config_.train_data.empty()) {
    TZ_CHECK(
        V >= static_cast<size_t>(kByteVocabSize),
        "the built-in corpus needs vocab_size >= 257 (bytes + EOT), model has " + std::to_string(V),
        "give training data with --data or raise model.vocab_size");
    std::vector<uint16_t> corpus = synthetic_corpus(kBuiltinCorpusTokens);
    std::vector<uint16_t> val(corpus.end() - kBuiltinValTokens, corpus.end());
    corpus.resize(corpus.size() - kBuiltinValTokens);
    s.unigram_entropy = unigram_entropy(corpus, V);
    std::vector<std::unique_ptr<TokenShard>> train, held_out;
    train.push_back(make_memory_shard("built-in corpus (train)", std::move(corpus)));
    held_out.push_back(make_memory_shard("built-in corpus (val)", std::move(val)));
    s.train_loader = std::make_unique<DataLoader>(std::move(train), B, T, V);
    if (config_.val_data.empty())
      s.val_loader = std::make_unique<DataLoader>(std::move(held_out), B, T, V);
  } else {
    s.train_loader = std::make_unique<DataLoader>(open_token_shards(config_.train_data), B, T, V);
  }
  if (!config_.val_data.empty())
    s.val_loader = std::make_unique<DataLoader>(open_token_shards(config_.val_data), B, T, V);

  s.device = make_device(config_.device, static_cast<int>(config_.threads));
  const auto budget = static_cast<size_t>(config_.device_memory_budget_gb * 1073741824.0);
  s.allocator = std::make_unique<DeviceAllocator>(*s.device, budget);
  s.model = std::make_unique<nn::GPT>(s.model_config, *s.allocator);
  s.params = std::make_unique<nn::LocalParams>(s.model->layout(), *s.allocator);

  std::vector<float> host(s.model->layout().total_numel());  // (total_numel) fp32
  if (config_.load_checkpoint.empty())
    nn::init_gpt2_params(s.model->layout(), s.model_config, config_.seed, host.data());
  else
    load_checkpoint(config_.load_checkpoint, s.model->layout(), host.data());
  s.device->copy(s.params->params(), host.data(), host.size() * sizeof(float),
                 CopyKind::host_to_device, s.device->default_stream());
  s.device->default_stream().synchronize();
  s.optimizer =
      std::make_unique<AdamWOptimizer>(config_.optimizer, s.model->layout(), *s.allocator);
  if (config_.bf16 || config_.fp16)
    log::info(
        "the CPU backend keeps working parameters in fp32; the bf16/fp16 setting has no "
        "effect here");
}

Trainer::~Trainer() = default;

namespace {

double validate(nn::GPT& model, nn::LocalParams& params, DataLoader& loader, size_t batches,
                size_t B, size_t T) {
  std::vector<int32_t> x(B * T), y(B * T);  // (B, T) each
  loader.reset();
  double sum = 0.0;
  for (size_t i = 0; i < batches; ++i) {
    loader.next_batch(x.data(), y.data());
    sum += static_cast<double>(model.evaluate(params, x.data(), y.data(), B, T));
  }
  return sum / static_cast<double>(batches);
}

}  // namespace

TrainResult Trainer::run(std::FILE* out) {
  State& s = *state_;
  const auto B = static_cast<size_t>(config_.micro_batch_size);
  const auto T = static_cast<size_t>(config_.seq_len);
  const int64_t accum = config_.gradient_accumulation_steps;
  LrSchedule schedule(config_.scheduler, config_.optimizer.lr, config_.steps);
  TrainResult result;
  result.unigram_entropy = s.unigram_entropy;
  result.parameter_count = s.model->layout().parameter_count();
  result.device_name = s.device->name();
  result.val_loss = std::numeric_limits<double>::quiet_NaN();
  if (out)
    std::fprintf(out,
                 "tierzero train: GPT-2 %s, %zu parameters, device %s, batch %zu x %zu x %lld "
                 "accumulation, %lld steps\n",
                 s.model_config.str().c_str(), result.parameter_count, result.device_name.c_str(),
                 B, T, static_cast<long long>(accum), static_cast<long long>(config_.steps));

  std::vector<int32_t> x(B * T), y(B * T);  // (B, T) inputs and targets
  for (int64_t step = 0; step < config_.steps; ++step) {
    Timer timer;
    s.params->zero_grads();
    double loss = 0.0;
    for (int64_t micro = 0; micro < accum; ++micro) {
      s.train_loader->next_batch(x.data(), y.data());
      loss += static_cast<double>(s.model->forward_backward(*s.params, x.data(), y.data(), B, T,
                                                            1.0f / static_cast<float>(accum)));
    }
    loss /= static_cast<double>(accum);
    const double lr = schedule.lr(step);
    StepStats st = s.optimizer->step(*s.params, lr, config_.gradient_clipping);
    s.device->default_stream().synchronize();
    StepRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = st.grad_norm;
    r.seconds = timer.seconds();
    r.tokens_per_second = static_cast<double>(B * T * static_cast<size_t>(accum)) / r.seconds;
    result.steps.push_back(r);
    print_step_line(out, r, config_.steps, MemoryTracker::global());
    if (s.val_loader && config_.val_every > 0 && (step + 1) % config_.val_every == 0 &&
        step + 1 < config_.steps && config_.val_batches > 0) {
      double v = validate(*s.model, *s.params, *s.val_loader,
                          static_cast<size_t>(config_.val_batches), B, T);
      if (out)
        std::fprintf(out, "val loss %.4f at step %lld\n", v, static_cast<long long>(step + 1));
    }
  }
  if (s.val_loader && config_.val_batches > 0) {
    result.val_loss = validate(*s.model, *s.params, *s.val_loader,
                               static_cast<size_t>(config_.val_batches), B, T);
    if (out) std::fprintf(out, "val loss %.4f", result.val_loss);
    if (out && std::isfinite(s.unigram_entropy))
      std::fprintf(out, " (unigram entropy of the corpus: %.4f nats)", s.unigram_entropy);
    if (out) std::fprintf(out, "\n");
  }
  if (!config_.save_checkpoint.empty()) {
    std::vector<float> host(s.model->layout().total_numel());  // (total_numel) fp32
    s.device->copy(host.data(), s.params->params(), host.size() * sizeof(float),
                   CopyKind::device_to_host, s.device->default_stream());
    s.device->default_stream().synchronize();
    save_checkpoint(config_.save_checkpoint, s.model_config, s.model->layout(), host.data());
    if (out) std::fprintf(out, "saved checkpoint '%s'\n", config_.save_checkpoint.c_str());
  }
  print_memory_summary(out, MemoryTracker::global());
  return result;
}

}  // namespace tierzero::train
