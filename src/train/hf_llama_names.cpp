// The Hugging Face <-> TierZero tensor table of the Llama family (see hf_llama_names.hpp).
#include "tierzero/train/hf_llama_names.hpp"

#include <cstring>

#include "tierzero/core/error.hpp"

namespace tierzero::train {

namespace {

using nn::ParamKind;

HfLlamaTensor whole(std::string name, ParamKind kind, int layer, size_t rows, size_t cols) {
  return HfLlamaTensor{std::move(name), kind, layer, rows, cols, {HfRowRun{0, 0, rows}}};
}

// q_proj, k_proj or v_proj (weight: cols C; bias: cols 1) into the grouped qkvw / qkvb: head h's
// hd rows go to its group's slot (query j of group g: slot j; k: slot rep; v: slot rep + 1).
HfLlamaTensor qkv_part(const std::string& name, char part, ParamKind kind, int layer,
                       const nn::GPTConfig& c, size_t cols) {
  const size_t hd = c.head_dim(), kvh = c.kv_heads(), rep = c.num_heads / kvh;
  const size_t heads = part == 'q' ? c.num_heads : kvh;
  HfLlamaTensor t{name, kind, layer, heads * hd, cols, {}};
  for (size_t h = 0; h < heads; ++h) {
    const size_t group = part == 'q' ? h / rep : h;
    const size_t slot = part == 'q' ? h % rep : (part == 'k' ? rep : rep + 1);
    t.runs.push_back(HfRowRun{h * hd, (group * (rep + 2) + slot) * hd, hd});
  }
  return t;
}

void add_block(std::vector<HfLlamaTensor>& out, const nn::GPTConfig& c, int l) {
  const std::string p = "model.layers." + std::to_string(l) + ".";
  const size_t C = c.channels, I = c.hidden();
  out.push_back(whole(p + "input_layernorm.weight", ParamKind::ln1w, l, C, 1));
  for (const char part : {'q', 'k', 'v'}) {
    const std::string proj = p + "self_attn." + part + "_proj.";
    out.push_back(qkv_part(proj + "weight", part, ParamKind::qkvw, l, c, C));
    if (c.arch.qkv_bias) out.push_back(qkv_part(proj + "bias", part, ParamKind::qkvb, l, c, 1));
  }
  out.push_back(
      whole(p + "self_attn.o_proj.weight", ParamKind::attprojw, l, C, c.attention_channels()));
  if (c.arch.linear_bias)
    out.push_back(whole(p + "self_attn.o_proj.bias", ParamKind::attprojb, l, C, 1));
  out.push_back(whole(p + "post_attention_layernorm.weight", ParamKind::ln2w, l, C, 1));
  out.push_back(whole(p + "mlp.gate_proj.weight", ParamKind::fcw, l, I, C));
  HfLlamaTensor up = whole(p + "mlp.up_proj.weight", ParamKind::fcw, l, I, C);
  up.runs[0].row = I;  // fcw: gate rows, then up rows
  out.push_back(up);
  out.push_back(whole(p + "mlp.down_proj.weight", ParamKind::fcprojw, l, C, I));
}

}  // namespace

std::vector<HfLlamaTensor> hf_llama_tensors(const nn::GPTConfig& c) {
  TZ_CHECK(!c.is_gpt2() && c.arch.norm == nn::NormKind::rmsnorm &&
               c.arch.positions == nn::PositionKind::rope && c.arch.mlp == nn::MlpKind::swiglu,
           "model " + c.str() + " is not a Llama-family model",
           "Hugging Face Llama names apply to RMSNorm, rotary, SwiGLU models");
  std::vector<HfLlamaTensor> out;
  out.push_back(whole("model.embed_tokens.weight", ParamKind::wte, -1, c.vocab_size, c.channels));
  for (size_t l = 0; l < c.num_layers; ++l) add_block(out, c, static_cast<int>(l));
  out.push_back(whole("model.norm.weight", ParamKind::lnfw, -1, c.channels, 1));
  if (!c.arch.tie_embeddings)
    out.push_back(whole("lm_head.weight", ParamKind::lmheadw, -1, c.vocab_size, c.channels));
  return out;
}

void hf_to_full(const HfLlamaTensor& t, const float* hf, float* full) {
  for (const HfRowRun& r : t.runs)
    std::memcpy(full + r.row * t.cols, hf + r.hf_row * t.cols, r.rows * t.cols * sizeof(float));
}

void full_to_hf(const HfLlamaTensor& t, const float* full, float* hf) {
  for (const HfRowRun& r : t.runs)
    std::memcpy(hf + r.hf_row * t.cols, full + r.row * t.cols, r.rows * t.cols * sizeof(float));
}

}  // namespace tierzero::train
