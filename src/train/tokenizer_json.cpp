// Reading tokenizer.json (Hugging Face `tokenizers` format) into a TokenizerSpec, checked key by
// key: what it does not understand is refused with the key's path, so a user learns which part
// of the file TierZero cannot follow instead of getting different ids.
#include "tokenizer_json.hpp"

#include <nlohmann/json.hpp>

#include "tierzero/core/error.hpp"
#include "tierzero/core/input_file.hpp"
#include "tierzero/core/json_text.hpp"

namespace tierzero::train {

namespace {

using nlohmann::json;

// Real tokenizer.json files are up to ~20 MB (Llama 3: 9 MB, Qwen 2: 7 MB).
constexpr size_t kMaxTokenizerBytes = size_t{256} << 20;

class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what,
                         const std::string& hint) const {
    TZ_THROW("tokenizer file '" + path_ + "': key '" + key + "': " + what, hint);
  }

  const json& need(const json& obj, const std::string& parent, const char* name) const {
    const std::string key = parent.empty() ? name : parent + "." + name;
    if (!obj.is_object()) fail(parent, "is not an object", "is this a tokenizer.json?");
    const auto it = obj.find(name);
    if (it == obj.end() || it->is_null())
      fail(key, "is missing", "a Hugging Face tokenizer.json for byte-level BPE has it");
    return *it;
  }

  bool flag(const json& obj, const std::string& parent, const char* name, bool fallback) const {
    const auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(parent + "." + name, "is not true or false", "");
    return it->get<bool>();
  }

  std::string text(const json& v, const std::string& key) const {
    if (!v.is_string()) fail(key, "is not a string", "");
    return v.get<std::string>();
  }

  // A key that must be absent, null, or the given value (an option TierZero does not implement).
  void refuse_unless(const json& obj, const std::string& parent, const char* name,
                     const json& allowed, const std::string& why) const {
    const auto it = obj.find(name);
    if (it == obj.end() || it->is_null() || *it == allowed) return;
    fail(parent + "." + name,
         "is " + it->dump() + ", which TierZero does not support (" + why + ")",
         "use a byte-level BPE tokenizer.json such as GPT-2's, Llama 3's or Qwen 2's");
  }

  // The normalizers TierZero applies as `tokenizers` does (tierzero/train/unicode_normalizer.hpp);
  // the others (Lowercase, Replace, Prepend, Strip, BertNormalizer, ...) change the text in ways it
  // does not follow, so a file with one is refused rather than given other ids.
  void read_normalizer(const json& n, const std::string& key,
                       std::vector<NormalizationForm>* forms) const {
    if (n.is_null()) return;
    const std::string type = text(need(n, key, "type"), key + ".type");
    if (type == "Sequence") {
      const json& steps = need(n, key, "normalizers");
      if (!steps.is_array()) fail(key + ".normalizers", "is not an array", "");
      for (size_t i = 0; i < steps.size(); ++i) {
        const std::string step = key + ".normalizers[" + std::to_string(i) + "]";
        if (steps[i].is_null()) fail(step, "is null", "a Sequence lists normalizers");
        read_normalizer(steps[i], step, forms);
      }
      return;
    }
    for (const NormalizationForm f : {NormalizationForm::kNFC, NormalizationForm::kNFD,
                                      NormalizationForm::kNFKC, NormalizationForm::kNFKD})
      if (type == normalization_form_name(f)) {
        forms->push_back(f);
        return;
      }
    fail(key + ".type", "normalizer type '" + type + "' is not supported",
         "TierZero applies the Unicode normalizers NFC, NFD, NFKC and NFKD, alone or in a "
         "Sequence (Qwen 2's tokenizer.json has NFC; GPT-2's and Llama 3's have none)");
  }

  void read_pre_tokenizer(const json& pre, const std::string& key, TokenizerSpec* spec,
                          bool* saw_byte_level) const {
    const std::string type = text(need(pre, key, "type"), key + ".type");
    if (*saw_byte_level)
      fail(key, "a '" + type + "' step after ByteLevel is not supported",
           "TierZero supports Split steps followed by one ByteLevel step");
    if (type == "Sequence") {
      const json& steps = need(pre, key, "pretokenizers");
      if (!steps.is_array()) fail(key + ".pretokenizers", "is not an array", "");
      for (size_t i = 0; i < steps.size(); ++i)
        read_pre_tokenizer(steps[i], key + ".pretokenizers[" + std::to_string(i) + "]", spec,
                           saw_byte_level);
    } else if (type == "Split") {
      read_split(pre, key, spec);
    } else if (type == "ByteLevel") {
      spec->add_prefix_space = flag(pre, key, "add_prefix_space", true);
      spec->byte_level_regex = flag(pre, key, "use_regex", true);
      *saw_byte_level = true;
    } else {
      fail(key + ".type", "pre-tokenizer type '" + type + "' is not supported",
           "TierZero supports byte-level BPE: Split (Isolated) and ByteLevel, alone or in a "
           "Sequence");
    }
  }

  void read_split(const json& pre, const std::string& key, TokenizerSpec* spec) const {
    const json& pattern = need(pre, key, "pattern");
    SplitStep step;
    if (pattern.is_object() && pattern.contains("Regex")) {
      step.key = key + ".pattern.Regex";
      step.pattern = text(pattern["Regex"], step.key);
    } else if (pattern.is_object() && pattern.contains("String")) {
      step.key = key + ".pattern.String";
      step.pattern = text(pattern["String"], step.key);
      step.literal = true;
    } else {
      fail(key + ".pattern", "is neither {\"Regex\": ...} nor {\"String\": ...}", "");
    }
    const std::string behavior = text(need(pre, key, "behavior"), key + ".behavior");
    if (behavior != "Isolated")
      fail(key + ".behavior", "Split behavior '" + behavior + "' is not supported",
           "the byte-level tokenizers of GPT-2, Llama 3 and Qwen 2 use Isolated");
    if (flag(pre, key, "invert", false))
      fail(key + ".invert", "an inverted Split is not supported", "");
    spec->splits.push_back(std::move(step));
  }

  void read_model(const json& root, TokenizerSpec* spec) const {
    const json& model = need(root, "", "model");
    const std::string type = text(need(model, "model", "type"), "model.type");
    if (type != "BPE")
      fail("model.type", "model type '" + type + "' is not supported", "TierZero reads BPE models");
    refuse_unless(model, "model", "dropout", json(), "BPE dropout changes ids at random");
    refuse_unless(model, "model", "continuing_subword_prefix", "", "byte-level BPE has none");
    refuse_unless(model, "model", "end_of_word_suffix", "", "byte-level BPE has none");
    refuse_unless(model, "model", "byte_fallback", false, "byte-level BPE needs no fallback");
    spec->ignore_merges = flag(model, "model", "ignore_merges", false);
    const json& vocab = need(model, "model", "vocab");
    if (!vocab.is_object()) fail("model.vocab", "is not an object of token: id", "");
    spec->vocab.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const json& id = it.value();
      if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX)
        fail("model.vocab." + it.key(), "id " + id.dump() + " is not an integer in [0, 2^31)", "");
      spec->vocab.emplace_back(it.key(), id.get<uint32_t>());
    }
    read_merges(need(model, "model", "merges"), spec);
  }

  // Merges are "a b" strings (GPT-2's file, older `tokenizers`) or ["a", "b"] pairs (newer).
  void read_merges(const json& merges, TokenizerSpec* spec) const {
    if (!merges.is_array()) fail("model.merges", "is not an array", "");
    spec->merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string key = "model.merges[" + std::to_string(i) + "]";
      const json& m = merges[i];
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || space == 0 || space + 1 >= s.size() ||
            s.find(' ', space + 1) != std::string::npos)
          fail(key, "merge \"" + s + "\" is not two tokens separated by one space", "");
        spec->merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        spec->merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        fail(key, "is neither \"a b\" nor [\"a\", \"b\"]", "");
      }
    }
  }

  void read_added_tokens(const json& root, TokenizerSpec* spec) const {
    const auto it = root.find("added_tokens");
    if (it == root.end() || it->is_null()) return;
    if (!it->is_array()) fail("added_tokens", "is not an array", "");
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      const json& t = (*it)[i];
      AddedTokenSpec a;
      const json& id = need(t, key, "id");
      if (!id.is_number_unsigned() || id.get<uint64_t>() > INT32_MAX)
        fail(key + ".id", "is not an integer in [0, 2^31)", "");
      a.id = id.get<uint32_t>();
      a.content = text(need(t, key, "content"), key + ".content");
      if (a.content.empty()) fail(key + ".content", "is empty", "");
      for (const char* unsupported : {"single_word", "lstrip", "rstrip"})
        if (flag(t, key, unsupported, false))
          fail(key + "." + unsupported, "is true, which TierZero does not support",
               "the special tokens of GPT-2, Llama 3 and Qwen 2 have it false");
      a.normalized = flag(t, key, "normalized", false);
      a.special = flag(t, key, "special", false);
      spec->added.push_back(std::move(a));
    }
  }

 private:
  std::string path_;
};

}  // namespace

TokenizerSpec read_tokenizer_json(const std::string& path) {
  const std::string hint = "give a Hugging Face tokenizer.json (byte-level BPE)";
  const json root =
      parse_json_text(read_input_file(path, "tokenizer file", hint, kMaxTokenizerBytes),
                      "tokenizer file '" + path + "'", hint);
  Reader r(path);
  if (!root.is_object()) r.fail("(top level)", "is not a JSON object", hint);
  TokenizerSpec spec;
  spec.path = path;
  const auto norm = root.find("normalizer");
  if (norm != root.end()) r.read_normalizer(*norm, "normalizer", &spec.normalizers);
  bool saw_byte_level = false;
  r.read_pre_tokenizer(r.need(root, "", "pre_tokenizer"), "pre_tokenizer", &spec, &saw_byte_level);
  if (!saw_byte_level)
    r.fail("pre_tokenizer", "has no ByteLevel step", "TierZero reads byte-level BPE tokenizers");
  r.read_model(root, &spec);
  r.read_added_tokens(root, &spec);
  return spec;
}

}  // namespace tierzero::train
