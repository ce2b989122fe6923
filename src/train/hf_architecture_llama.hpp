// The Llama family's tables (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM), registered
// by hf_architecture.cpp. Private to src/train.
#pragma once

#include "tierzero/train/hf_architecture.hpp"

namespace tierzero::train::detail {

const HfArchitecture& hf_llama_architecture();
const HfArchitecture& hf_mistral_architecture();
const HfArchitecture& hf_qwen2_architecture();

}  // namespace tierzero::train::detail
