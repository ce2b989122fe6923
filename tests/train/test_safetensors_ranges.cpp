// Gpt2SafetensorsRanges (--load model.safetensors by range) against load_gpt2_safetensors (the
// whole file read at once): random ranges of the flat buffer, ranges that split tensors mid-row,
// cover padding, span several tensors or hold one element, read with small blocks too so that a
// transposed tensor is gathered in many pieces; and a damaged file is a clear Error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "scratch_dir.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"

using namespace tierzero;

namespace {

// Dims that divide nothing evenly: rows and columns differ in every matrix, the vocabulary is
// padded, and layout tensors are separated by alignment padding.
nn::GPTConfig odd_shape() {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.padded_vocab_size = 48;
  c.max_seq_len = 9;
  c.num_layers = 3;
  c.num_heads = 4;
  c.channels = 20;
  return c;
}

std::string temp_path(const std::string& name) {
  return tierzero::testing::scratch_dir("tz_safet") + "/" + name;
}

// A file of random values (every element of ours, wte's padded rows too: the file drops them).
void write_random(const std::string& path, const nn::GPTConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  train::write_gpt2_safetensors(path, c, [&](const train::Gpt2Tensor& t, float* ours) {
    for (size_t k = 0; k < t.rows * t.cols; ++k) ours[k] = dist(rng);
  });
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the Error that fn throws ("" when none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct Range {
  size_t begin, count;
};

// Ranges of every kind the test wants, over `layout`.
std::vector<Range> ranges_to_check(const nn::ParamLayout& layout, std::mt19937& rng) {
  const size_t total = layout.total_numel();
  std::vector<Range> out;
  const auto pick = [&](size_t lo, size_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  out.push_back({0, total});  // everything, padding included
  for (const nn::ParamTensor& t : layout.tensors()) {
    const size_t cols = static_cast<size_t>(t.shape[t.shape.rank() - 1]);
    out.push_back({t.offset, t.numel});                   // the whole tensor
    out.push_back({t.offset + cols / 2, cols});           // mid-row to mid-row
    out.push_back({t.offset + t.numel - 1, 1});           // its last element
    out.push_back({t.offset + pick(0, t.numel - 1), 1});  // one element
    if (t.offset + t.numel + 3 <= total)
      out.push_back({t.offset + t.numel - 2, 5});  // into the gap
    for (int k = 0; k < 6; ++k) {                  // random parts inside the tensor
      const size_t b = pick(0, t.numel - 1);
      out.push_back({t.offset + b, pick(1, t.numel - b)});
    }
  }
  for (int k = 0; k < 400; ++k) {  // random ranges, short and long, across tensors
    const size_t b = pick(0, total - 1);
    const size_t longest = std::min(total - b, k % 4 == 0 ? total : size_t{3000});
    out.push_back({b, pick(1, longest)});
  }
  return out;
}

}  // namespace

TEST(SafetensorsRanges, EveryRangeEqualsTheWholeFileLoadBitwise) {
  const nn::GPTConfig c = odd_shape();
  const std::string path = temp_path("model.safetensors");
  write_random(path, c, 11);
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  ASSERT_EQ(train::read_gpt2_safetensors_config(path).str(), c.str());
  std::vector<float> whole(layout.total_numel(), 0.0f);
  train::load_gpt2_safetensors(path, layout, whole.data());

  std::mt19937 rng(5);
  const std::vector<Range> ranges = ranges_to_check(layout, rng);
  // The default block holds any of this model's tensors and reads whole stretches of file rows;
  // the small ones split tensors, down to one float per pread, and skip 0 makes a block pread each
  // file row's needed floats alone whenever it keeps under half of them.
  struct Blocking {
    size_t block, skip;
  };
  const size_t kDefault = train::Gpt2SafetensorsRanges::kDefaultBlockFloats;
  const size_t kSkip = train::Gpt2SafetensorsRanges::kDefaultSkipFloats;
  for (const Blocking b : {Blocking{kDefault, kSkip}, Blocking{kDefault, 0}, Blocking{97, kSkip},
                           Blocking{97, 0}, Blocking{7, 0}, Blocking{1, kSkip}}) {
    const size_t block = b.block;
    train::Gpt2SafetensorsRanges reader(path, layout, b.block, b.skip);
    size_t mismatched = 0, elements = 0;
    std::vector<float> got;
    for (const Range& r : ranges) {
      got.assign(r.count, std::nanf(""));  // every element must be written, padding with 0
      reader.read(r.begin, r.count, got.data());
      elements += r.count;
      if (std::memcmp(got.data(), whole.data() + r.begin, r.count * sizeof(float)) != 0) {
        ++mismatched;
        ADD_FAILURE() << "block " << block << ", skip " << b.skip << ": range [" << r.begin << ", "
                      << r.begin + r.count << ") differs from load_gpt2_safetensors";
      }
    }
    // One element at a time, all of them.
    size_t single_mismatched = 0;
    for (size_t e = 0; e < layout.total_numel(); ++e) {
      float v = std::nanf("");
      reader.read(e, 1, &v);
      if (std::memcmp(&v, &whole[e], sizeof(float)) != 0) ++single_mismatched;
    }
    std::printf(
        "block %zu floats, skip %zu: %zu ranges (%zu elements) checked, %zu mismatched; %zu single "
        "elements, "
        "%zu mismatched; block buffer %zu floats\n",
        block, b.skip, ranges.size(), elements, mismatched, layout.total_numel(), single_mismatched,
        reader.buffer_floats());
    EXPECT_EQ(single_mismatched, 0u) << "block " << block;
    EXPECT_LE(reader.buffer_floats(), block) << "the block buffer outgrew its bound";
  }
  // open_model_ranges picks this reader by the extension.
  const std::unique_ptr<train::ModelRanges> any = train::open_model_ranges(path, layout);
  std::vector<float> got(layout.total_numel());
  any->read(0, got.size(), got.data());
  EXPECT_EQ(std::memcmp(got.data(), whole.data(), got.size() * sizeof(float)), 0);
}

// wte's padded rows are not in the file: they read as zero, and a model whose padding differs
// from the file's is refused rather than read shifted.
TEST(SafetensorsRanges, PaddedVocabularyRowsReadZero) {
  const nn::GPTConfig c = odd_shape();
  const std::string path = temp_path("pad.safetensors");
  write_random(path, c, 3);
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  train::Gpt2SafetensorsRanges reader(path, layout);
  const nn::ParamTensor& wte = layout.get(nn::ParamKind::wte);
  const size_t real = c.vocab_size * c.channels;
  std::vector<float> pad(wte.numel - real, 1.0f);
  reader.read(wte.offset + real, pad.size(), pad.data());
  for (float v : pad) EXPECT_EQ(v, 0.0f);
  std::vector<float> row(c.channels, 0.0f);
  reader.read(wte.offset + real - c.channels, row.size(), row.data());  // the last real row
  size_t nonzero = 0;
  for (float v : row) nonzero += v != 0.0f;
  EXPECT_GT(nonzero, 0u);

  nn::GPTConfig other = c;
  other.padded_vocab_size = 64;
  const nn::ParamLayout other_layout = nn::gpt_param_layout(other);
  const std::string msg = error_of([&] { train::Gpt2SafetensorsRanges r(path, other_layout); });
  std::printf("other padding: %s\n", msg.c_str());
  EXPECT_NE(msg.find("does not match the model's layout"), std::string::npos) << msg;
}

TEST(SafetensorsRanges, DamagedFilesAreClearErrors) {
  const nn::GPTConfig c = odd_shape();
  const nn::ParamLayout layout = nn::gpt_param_layout(c);
  const std::string good = temp_path("good.safetensors");
  write_random(good, c, 4);
  const std::string bytes = read_bytes(good);
  const auto expect_error = [&](const std::string& name, const std::string& content,
                                const std::vector<std::string>& words) {
    const std::string path = temp_path(name);
    write_bytes(path, content);
    EXPECT_THROW(train::Gpt2SafetensorsRanges(path, layout), Error) << name;
    const std::string msg = error_of([&] { train::Gpt2SafetensorsRanges r(path, layout); });
    std::printf("%s: %s\n", name.c_str(), msg.c_str());
    EXPECT_NE(msg.find(path), std::string::npos) << "the error does not name the file: " << msg;
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  };
  // The last tensor's data cut short; the header cut short; no header at all.
  expect_error("cut.safetensors", bytes.substr(0, bytes.size() - 10), {"ln_f.bias", "truncated"});
  expect_error("cut_header.safetensors", bytes.substr(0, 40), {"not a safetensors file"});
  expect_error("empty.safetensors", "", {"not a safetensors file"});
  // Same-length edits of the header: a wrong dtype, a missing tensor, broken JSON.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  const size_t header_end = 8 + header_len;
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string b = bytes;
    const size_t at = b.find(from);
    EXPECT_LT(at, header_end) << from;
    b.replace(at, from.size(), to);
    return b;
  };
  expect_error("f16.safetensors", edited("\"F32\"", "\"F16\""), {"wte.weight", "F16"});
  expect_error("missing.safetensors", edited("\"h.2.mlp.c_fc.bias\"", "\"h.2.mlp.c_fc.bia_\""),
               {"h.2.mlp.c_fc.bias", "has no tensor"});
  expect_error("shape.safetensors", edited("\"shape\":[20,60]", "\"shape\":[20,61]"),
               {"h.0.attn.c_attn.weight", "[20,61]", "data_offsets", "needs 4880"});
  expect_error("wpe.safetensors", edited("\"shape\":[9,20]", "\"shape\":[9,21]"), {"wpe.weight"});
  expect_error("json.safetensors", edited("\"wte.weight\":{", "\"wte.weight\":["),
               {"not valid JSON", "line 1, column"});

  // The model read from the file itself (eval --load): a block missing one tensor is an error
  // naming it, not the model's end (it loaded as a 1-block model), and a block index past the
  // limit is refused before anything is sized by it.
  const auto config_error = [&](const std::string& name, const std::string& content,
                                const std::vector<std::string>& words) {
    const std::string path = temp_path(name);
    write_bytes(path, content);
    const std::string msg = error_of([&] { (void)train::read_gpt2_safetensors_config(path); });
    std::printf("%s (its own model): %s\n", name.c_str(), msg.c_str());
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  };
  EXPECT_EQ(train::read_gpt2_safetensors_config(good).num_layers, 3u);
  config_error("block1.safetensors", edited("\"h.1.ln_1.weight\"", "\"h.1.ln_1.weigh_\""),
               {"h.1.ln_1.weight", "has no tensor"});
  config_error("block_index.safetensors", edited("\"h.2.ln_1.weight\"", "\"h.9999.ln_1.wei\""),
               {"h.9999.ln_1.wei", "names no block"});

  // Truncated after opening: the read that reaches the missing bytes fails, naming the tensor.
  const std::string later = temp_path("later.safetensors");
  write_bytes(later, bytes);
  train::Gpt2SafetensorsRanges reader(later, layout);
  std::filesystem::resize_file(later, bytes.size() - 4);
  std::vector<float> head(8);
  EXPECT_NO_THROW(reader.read(0, head.size(), head.data()));  // wte is still whole
  const nn::ParamTensor& lnfb = layout.get(nn::ParamKind::lnfb);
  std::vector<float> tail(lnfb.numel);
  const std::string msg = error_of([&] { reader.read(lnfb.offset, tail.size(), tail.data()); });
  std::printf("truncated after opening: %s\n", msg.c_str());
  EXPECT_NE(msg.find("ln_f.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find(later), std::string::npos) << msg;
  EXPECT_NE(msg.find("ended early"), std::string::npos) << msg;
  // A range past the model's end is refused, not read.
  EXPECT_THROW(reader.read(layout.total_numel() - 1, 2, tail.data()), Error);
}
