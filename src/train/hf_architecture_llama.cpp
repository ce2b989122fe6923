// The Llama family's Hugging Face tables: config.json (LlamaConfig, MistralConfig, Qwen2Config
// keys; rope as transformers 4 writes it, rope_theta and rope_scaling, or as 5 does,
// rope_parameters) to our GPTConfig and back, and the tensor names of hf_llama_names (q, k and v
// heads placed in the grouped qkv by row spans, gate and up in fc).
#include <cmath>

#include "hf_architecture_llama.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/hf_llama_names.hpp"

namespace tierzero::train::detail {

namespace {

enum class Family { llama, mistral, qwen2 };

const char* arch_name(Family f) {
  return f == Family::llama     ? "LlamaForCausalLM"
         : f == Family::mistral ? "MistralForCausalLM"
                                : "Qwen2ForCausalLM";
}

[[noreturn]] void bad_key(const std::string& source, const std::string& key,
                          const std::string& problem, const std::string& hint) {
  TZ_THROW("'" + source + "' key '" + key + "' " + problem, hint);
}

struct Keys {
  const nlohmann::json& j;
  const std::string& source;
  Family family;

  const nlohmann::json& need(const std::string& key) const {
    if (!j.contains(key) || j.at(key).is_null())
      TZ_THROW("'" + source + "' lacks key '" + key + "' (needed for " + arch_name(family) + ")",
               "give the config.json written with the model's weights");
    return j.at(key);
  }
  size_t count(const std::string& key) const { return count_of(key, need(key)); }
  size_t count_or(const std::string& key, size_t fallback) const {
    return has(key) ? count(key) : fallback;
  }
  size_t count_of(const std::string& key, const nlohmann::json& v) const {
    if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 ||
        v.get<uint64_t>() > (uint64_t{1} << 40))
      bad_key(source, key, "must be a positive whole number, got " + v.dump(),
              "the config.json is damaged");
    return static_cast<size_t>(v.get<uint64_t>());
  }
  double number(const std::string& key, const nlohmann::json& v) const {
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      bad_key(source, key, "must be a positive number, got " + v.dump(),
              "the config.json is damaged");
    return v.get<double>();
  }
  bool has(const std::string& key) const { return j.contains(key) && !j.at(key).is_null(); }
  bool flag(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j.at(key).is_boolean())
      bad_key(source, key, "must be true or false, got " + j.at(key).dump(), "");
    return j.at(key).get<bool>();
  }
  void require_false(const std::string& key, const std::string& why) const {
    if (flag(key, false)) bad_key(source, key, "is true: " + why, "this build cannot load it");
  }
};

// rope_theta and the llama3 scaling, from rope_parameters (transformers 5) or rope_theta +
// rope_scaling (4).
void read_rope(const Keys& k, nn::GPTArch& a) {
  const bool v5 = k.has("rope_parameters");
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& rope = v5 ? k.j.at(key) : (k.has(key) ? k.j.at(key) : none);
  if (!rope.is_object()) bad_key(k.source, key, "must be an object, got " + rope.dump(), "");
  const nlohmann::json& theta = v5 ? rope.value("rope_theta", nlohmann::json(10000.0))
                                   : k.j.value("rope_theta", nlohmann::json(10000.0));
  a.rope_theta = k.number("rope_theta", theta);
  const std::string type = rope.value("rope_type", rope.value("type", std::string("default")));
  if (type == "default") return;
  if (type != "llama3")
    bad_key(k.source, key, "has rope_type '" + type + "'; this build has default and llama3",
            "only models with plain or Llama 3 rotary scaling can be loaded");
  nn::RopeScaling& s = a.rope_scaling;
  s.llama3 = true;
  for (const char* f :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
    if (!rope.contains(f)) bad_key(k.source, key, std::string("lacks '") + f + "' (llama3)", "");
  s.factor = k.number(key + ".factor", rope.at("factor"));
  s.low_freq_factor = k.number(key + ".low_freq_factor", rope.at("low_freq_factor"));
  s.high_freq_factor = k.number(key + ".high_freq_factor", rope.at("high_freq_factor"));
  s.original_max_position_embeddings = k.count_of(key + ".original_max_position_embeddings",
                                                  rope.at("original_max_position_embeddings"));
}

nn::GPTConfig from_json(const nlohmann::json& j, const std::string& source, Family family) {
  const Keys k{j, source, family};
  nn::GPTConfig c;
  nn::GPTArch& a = c.arch;
  c.channels = k.count("hidden_size");
  c.num_heads = k.count("num_attention_heads");
  c.num_layers = k.count("num_hidden_layers");
  c.max_seq_len = k.count("max_position_embeddings");
  c.vocab_size = k.count("vocab_size");
  c.padded_vocab_size = k.count_or("tierzero_padded_vocab_size", (c.vocab_size + 127) / 128 * 128);
  a.norm = nn::NormKind::rmsnorm;
  a.norm_eps = k.number("rms_norm_eps", k.need("rms_norm_eps"));
  a.positions = nn::PositionKind::rope;
  a.mlp = nn::MlpKind::swiglu;
  a.intermediate_size = k.count("intermediate_size");
  const size_t kv = k.count_or("num_key_value_heads", c.num_heads);
  a.num_kv_heads = kv == c.num_heads ? 0 : kv;
  const size_t hd = k.count_or("head_dim", c.channels / c.num_heads);
  a.head_dim = hd * c.num_heads == c.channels ? 0 : hd;
  a.qkv_bias = family == Family::qwen2;
  a.linear_bias = false;
  a.tie_embeddings = k.flag("tie_word_embeddings", false);
  if (k.has("hidden_act") && j.at("hidden_act") != "silu")
    bad_key(source, "hidden_act", "is " + j.at("hidden_act").dump() + ", this build's is silu",
            "only SwiGLU (silu) models can be loaded");
  k.require_false("attention_bias", "the attention projections' biases are not built");
  k.require_false("mlp_bias", "the MLP projections' biases are not built");
  k.require_false("use_sliding_window", "sliding-window attention is not built");
  if (family == Family::mistral && k.has("sliding_window"))
    bad_key(source, "sliding_window",
            "is " + j.at("sliding_window").dump() + ", sliding-window attention is not built",
            "set it to null when training at a context within the window");
  read_rope(k, a);
  try {
    c.validate();
  } catch (const Error& e) {
    TZ_THROW("'" + source + "': " + e.what_failed(), e.hint());
  }
  return c;
}

nlohmann::ordered_json to_json(const nn::GPTConfig& c) {
  const bool qwen = c.arch.qkv_bias;
  nlohmann::ordered_json rope = {{"rope_type", "default"}};
  if (c.arch.rope_scaling.llama3) {
    const nn::RopeScaling& s = c.arch.rope_scaling;
    rope = {{"rope_type", "llama3"},
            {"factor", s.factor},
            {"low_freq_factor", s.low_freq_factor},
            {"high_freq_factor", s.high_freq_factor},
            {"original_max_position_embeddings", s.original_max_position_embeddings}};
  }
  return {{"architectures", {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"}},
          {"model_type", qwen ? "qwen2" : "llama"},
          {"hidden_size", c.channels},
          {"intermediate_size", c.hidden()},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_dim()},
          {"num_hidden_layers", c.num_layers},
          {"max_position_embeddings", c.max_seq_len},
          {"vocab_size", c.vocab_size},
          {"rms_norm_eps", c.arch.norm_eps},
          {"hidden_act", "silu"},
          {"rope_theta", c.arch.rope_theta},
          {"rope_scaling", c.arch.rope_scaling.llama3 ? rope : nlohmann::ordered_json()},
          {"tie_word_embeddings", c.arch.tie_embeddings},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"tierzero_padded_vocab_size", c.padded_vocab_size}};
}

std::vector<HfTensor> tensors(const nn::GPTConfig& c) {
  std::vector<HfTensor> out;
  for (const HfLlamaTensor& t : hf_llama_tensors(c)) {
    HfTensor h;
    h.name = t.hf_name;
    h.kind = t.kind;
    h.layer = t.layer;
    h.rows = t.rows;
    h.cols = t.cols;
    h.shape = t.cols == 1 ? std::vector<size_t>{t.rows} : std::vector<size_t>{t.rows, t.cols};
    for (const HfRowRun& r : t.runs) h.spans.push_back(HfRowSpan{r.hf_row, r.row, r.rows});
    out.push_back(std::move(h));
  }
  return out;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A tied head's lm_head.weight is embed_tokens; old exports carry rotary inv_freq buffers.
bool ignorable(const std::string& name) {
  return name == "lm_head.weight" || ends_with(name, ".rotary_emb.inv_freq");
}

}  // namespace

const HfArchitecture& hf_llama_architecture() {
  static const HfArchitecture a{
      "LlamaForCausalLM",
      "llama",
      {""},
      [](const nlohmann::json& j, const std::string& s) { return from_json(j, s, Family::llama); },
      to_json,
      tensors,
      ignorable};
  return a;
}

const HfArchitecture& hf_mistral_architecture() {
  static const HfArchitecture a{"MistralForCausalLM",
                                "mistral",
                                {""},
                                [](const nlohmann::json& j, const std::string& s) {
                                  return from_json(j, s, Family::mistral);
                                },
                                to_json,
                                tensors,
                                ignorable};
  return a;
}

const HfArchitecture& hf_qwen2_architecture() {
  static const HfArchitecture a{
      "Qwen2ForCausalLM",
      "qwen2",
      {""},
      [](const nlohmann::json& j, const std::string& s) { return from_json(j, s, Family::qwen2); },
      to_json,
      tensors,
      ignorable};
  return a;
}

}  // namespace tierzero::train::detail
