// The Hugging Face architecture tables (see hf_architecture.hpp). GPT-2's names and Conv1D
// transposes are safetensors_gpt2's; its config.json keys are GPT2Config's.
#include "tierzero/train/hf_architecture.hpp"

#include <cmath>

#include "hf_architecture_llama.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"

namespace tierzero::train {

namespace {

// Our layernorms' epsilon (kernels/cpu/layernorm.cpp, the CUDA kernels alike).
constexpr double kLayerNormEps = 1e-5;

[[noreturn]] void bad_key(const std::string& source, const std::string& key,
                          const std::string& problem, const std::string& hint) {
  TZ_THROW("'" + source + "' key '" + key + "' " + problem, hint);
}

const nlohmann::json& require_key(const nlohmann::json& j, const std::string& source,
                                  const std::string& key, const std::string& arch) {
  if (!j.contains(key))
    TZ_THROW("'" + source + "' lacks key '" + key + "' (needed for " + arch + ")",
             "give the config.json written with the model's weights");
  return j.at(key);
}

size_t count_key(const nlohmann::json& j, const std::string& source, const std::string& key,
                 const std::string& arch) {
  const nlohmann::json& v = require_key(j, source, key, arch);
  if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > (uint64_t{1} << 40))
    bad_key(source, key, "must be a positive whole number, got " + v.dump(),
            "the config.json is damaged");
  return static_cast<size_t>(v.get<uint64_t>());
}

nn::GPTConfig gpt2_from_json(const nlohmann::json& j, const std::string& source) {
  const std::string arch = "GPT2LMHeadModel";
  nn::GPTConfig c;
  c.channels = count_key(j, source, "n_embd", arch);
  c.num_heads = count_key(j, source, "n_head", arch);
  c.num_layers = count_key(j, source, "n_layer", arch);
  c.max_seq_len = count_key(j, source, "n_positions", arch);
  c.vocab_size = count_key(j, source, "vocab_size", arch);
  const nlohmann::json& eps = require_key(j, source, "layer_norm_epsilon", arch);
  if (!eps.is_number() || std::abs(eps.get<double>() - kLayerNormEps) > 1e-12)
    bad_key(source, "layer_norm_epsilon",
            "is " + eps.dump() + ", this build's layernorm uses 1e-05",
            "only models trained with layer_norm_epsilon 1e-5 (every GPT-2) can be loaded");
  if (j.contains("activation_function")) {
    const nlohmann::json& act = j.at("activation_function");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      bad_key(source, "activation_function",
              "is " + act.dump() + ", this build's GELU is the tanh one (gelu_new)",
              "only GPT-2 models with activation_function gelu_new can be loaded");
  }
  if (j.contains("tie_word_embeddings") && j.at("tie_word_embeddings") != true)
    bad_key(source, "tie_word_embeddings", "is " + j.at("tie_word_embeddings").dump(),
            "this build's GPT-2 ties the head to wte; an untied head cannot be loaded");
  // Our padded vocabulary (extra zero rows of wte) is kept across an export when written.
  const size_t V = c.vocab_size;
  c.padded_vocab_size = (V + 127) / 128 * 128;
  if (j.contains("tierzero_padded_vocab_size")) {
    const size_t vp = count_key(j, source, "tierzero_padded_vocab_size", arch);
    if (vp < V || vp > V + std::max<size_t>(V, 1024))
      bad_key(source, "tierzero_padded_vocab_size",
              "= " + std::to_string(vp) + " is outside [vocab_size, 2 vocab_size]",
              "remove the key (the vocabulary is then padded to a multiple of 128)");
    c.padded_vocab_size = vp;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    TZ_THROW("'" + source + "': " + e.what_failed(), e.hint());
  }
  return c;
}

nlohmann::ordered_json gpt2_to_json(const nn::GPTConfig& c) {
  return {{"architectures", {"GPT2LMHeadModel"}},
          {"model_type", "gpt2"},
          {"n_embd", c.channels},
          {"n_head", c.num_heads},
          {"n_layer", c.num_layers},
          {"n_positions", c.max_seq_len},
          {"n_ctx", c.max_seq_len},
          {"vocab_size", c.vocab_size},
          {"layer_norm_epsilon", kLayerNormEps},
          {"activation_function", "gelu_new"},
          {"tie_word_embeddings", true},
          // The last token ends a document, GPT-2's 50256 and the byte tokenizer's 256 alike.
          {"bos_token_id", c.vocab_size - 1},
          {"eos_token_id", c.vocab_size - 1},
          {"tierzero_padded_vocab_size", c.padded_vocab_size}};
}

std::vector<HfTensor> gpt2_hf_tensors(const nn::GPTConfig& c) {
  std::vector<HfTensor> out;
  for (const Gpt2Tensor& t : gpt2_tensors(c)) {
    HfTensor h;
    h.name = t.name;
    h.kind = t.kind;
    h.layer = t.layer;
    h.rows = t.kept_rows;  // wte: the real vocabulary's rows; the rest of ours stays zero
    h.cols = t.cols;
    h.transpose = t.transpose;
    h.shape = t.shape;
    h.spans = {HfRowSpan{0, 0, h.rows}};
    out.push_back(std::move(h));
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// lm_head.weight is wte (tied); attn.bias and attn.masked_bias are causal-mask buffers that old
// exports carry.
bool gpt2_ignorable(const std::string& name) {
  return name == "lm_head.weight" || ends_with(name, ".attn.bias") ||
         ends_with(name, ".attn.masked_bias");
}

const HfArchitecture kGpt2{"GPT2LMHeadModel", "gpt2",          {"transformer.", ""}, gpt2_from_json,
                           gpt2_to_json,      gpt2_hf_tensors, gpt2_ignorable};

std::vector<const HfArchitecture*> all() {
  return {&kGpt2, &detail::hf_llama_architecture(), &detail::hf_mistral_architecture(),
          &detail::hf_qwen2_architecture()};
}

}  // namespace

const HfArchitecture& hf_architecture(const std::string& name, const std::string& source) {
  for (const HfArchitecture* a : all())
    if (name == a->name) return *a;
  TZ_THROW("'" + source + "': architecture '" + name + "' is not supported",
           "this build loads GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM and "
           "Qwen2ForCausalLM directories");
}

const HfArchitecture* hf_architecture_by_model_type(const std::string& model_type) {
  for (const HfArchitecture* a : all())
    if (model_type == a->model_type) return a;
  return nullptr;
}

const HfArchitecture& hf_architecture_of(const nn::GPTConfig& config) {
  if (config.is_gpt2()) return kGpt2;
  return config.arch.qkv_bias ? detail::hf_qwen2_architecture() : detail::hf_llama_architecture();
}

}  // namespace tierzero::train
