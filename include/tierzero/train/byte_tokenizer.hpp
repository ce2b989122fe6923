// The byte-level tokenizer: token = byte value (0..255), plus an end-of-text token 256.
// It needs no vocabulary file, so prepare-data and the built-in corpus work anywhere.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tierzero::train {

constexpr uint16_t kEotToken = 256;
constexpr int64_t kByteVocabSize = 257;

std::vector<uint16_t> byte_tokenize(const std::string& text);
std::string byte_detokenize(const std::vector<uint16_t>& tokens);  // EOT shown as "\n<|eot|>\n"

}  // namespace tierzero::train
