// Byte-level tokenization.
#include "tierzero/train/byte_tokenizer.hpp"

namespace tierzero::train {

std::vector<uint16_t> byte_tokenize(const std::string& text) {
  std::vector<uint16_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::string byte_detokenize(const std::vector<uint16_t>& tokens) {
  std::string s;
  for (uint16_t t : tokens) {
    if (t == kEotToken)
      s += "\n<|eot|>\n";
    else if (t < 256)
      s += static_cast<char>(t);
    else
      s += "<?>";
  }
  return s;
}

}  // namespace tierzero::train
