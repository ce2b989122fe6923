// Each class of hostile input the readers refuse, with the message naming the file and the field:
// forged sizes (a billion layers, token counts the file does not hold, overflowing shapes)
// refused before any allocation; safetensors headers validated field by field; FIFOs and
// directories refused without blocking; JSON errors with line and column (1e400 included).
// Runs under alloc_guard: no single allocation above 256 MiB.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>
#include <chrono>
#include <cstring>
#include <future>

#include "alloc_guard.hpp"
#include "reader_seeds.hpp"
#include "tierzero/core/checked_math.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/nn/gpt_modules.hpp"
#include "tierzero/profile/profile_json.hpp"
#include "tierzero/train/checkpoint.hpp"
#include "tierzero/train/safetensors_gpt2.hpp"
#include "tierzero/train/token_shards.hpp"
#include "tierzero/train/train_config.hpp"

namespace tierzero::test {
namespace {

std::string path_of(const std::string& name) {
  return scratch_dir() + "/" + name;
}

// The Error `fn` throws (fails the test if it throws nothing or something else).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    std::printf("  refused: %s\n", e.what());
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a tierzero::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "accepted";
  return "";
}

void expect_has(const std::string& message, std::initializer_list<const char*> needles) {
  for (const char* n : needles)
    EXPECT_NE(message.find(n), std::string::npos) << n << " in: " << message;
}

void set_int32(std::string& bytes, size_t index, int32_t v) {
  std::memcpy(bytes.data() + index * 4, &v, 4);
}

TEST(CheckedMath, OverflowIsAnErrorNamingWhat) {
  EXPECT_EQ(checked_mul(3, 5, "x"), 15u);
  EXPECT_EQ(checked_add(3, 5, "x"), 8u);
  expect_has(error_of([] { checked_mul(SIZE_MAX / 2, 3, "the weights"); }),
             {"the weights overflows"});
  expect_has(error_of([] { checked_add(SIZE_MAX, 1, "the file size"); }),
             {"the file size overflows"});
}

TEST(ModelFileHeader, ForgedHugeLayerCountIsRefusedWithoutAllocating) {
  const std::string path = path_of("huge_layers.bin");
  std::string bytes = write_seed_model_file(path);
  set_int32(bytes, 4, 1000000000);  // n_layer 1e9 in a file of a few KB
  write_bytes(path, bytes);
  reset_largest_allocation();
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { train::read_checkpoint_config(path); });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  refused in %.4f s, largest single allocation %zu bytes\n", s,
              largest_allocation());
  expect_has(e, {path.c_str(), "truncated", "L=1000000000"});
  EXPECT_LT(largest_allocation(), size_t{1} << 20);
  // The same through the ranged reader the trainer uses.
  error_of([&] { train::ModelFileRanges r(path, nn::gpt_param_layout(tiny_model())); });
}

TEST(ModelFileHeader, ShapesWhoseSizeOverflowsAreRefused) {
  const std::string path = path_of("overflow_shape.bin");
  std::string bytes = write_seed_model_file(path);
  for (size_t i : {2, 3, 4, 6, 7}) set_int32(bytes, i, INT32_MAX);
  set_int32(bytes, 5, 1);
  write_bytes(path, bytes);
  reset_largest_allocation();
  expect_has(error_of([&] { train::read_checkpoint_config(path); }), {path.c_str()});
  EXPECT_LT(largest_allocation(), size_t{1} << 20);
  set_int32(bytes, 6, -5);
  write_bytes(path, bytes);
  expect_has(error_of([&] { train::read_checkpoint_config(path); }),
             {"non-positive channels", "-5"});
}

TEST(TokenShardHeader, ForgedTokenCountIsRefused) {
  const std::string path = path_of("forged_count.bin");
  std::string bytes = write_seed_shard(path);
  set_int32(bytes, 2, INT32_MAX);
  write_bytes(path, bytes);
  expect_has(error_of([&] { train::open_token_shard(path); }),
             {path.c_str(), "truncated", "2147483647"});
  set_int32(bytes, 2, -7);
  write_bytes(path, bytes);
  expect_has(error_of([&] { train::open_token_shard(path); }), {path.c_str(), "negative"});
}

// The seed safetensors file with its header rewritten by `edit`.
std::string edited_safetensors(const std::string& name,
                               const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = path_of(name);
  const std::string file = write_seed_safetensors(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  edit(header);
  const std::string text = header.dump();
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>(text.size() >> (8 * i));
  write_bytes(path, out + text + file.substr(8 + n));
  return path;
}

TEST(SafetensorsHeader, OverlappingTensorsAreRefused) {
  const std::string path = edited_safetensors("overlap.safetensors", [](nlohmann::json& h) {
    h["h.0.ln_1.bias"]["data_offsets"] = h["h.0.ln_1.weight"]["data_offsets"];
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {path.c_str(), "h.0.ln_1.weight", "h.0.ln_1.bias", "overlap"});
}

TEST(SafetensorsHeader, FractionalAndNegativeOffsetsAreRefused) {
  std::string path = edited_safetensors("fraction.safetensors", [](nlohmann::json& h) {
    const double b = h["wpe.weight"]["data_offsets"][0].get<double>();
    h["wpe.weight"]["data_offsets"][0] = b + 0.5;
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {path.c_str(), "wpe.weight", "data_offsets", "non-negative integers"});
  path = edited_safetensors("negative.safetensors",
                            [](nlohmann::json& h) { h["wpe.weight"]["shape"][0] = -16; });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"wpe.weight", "'shape'", "-16"});
  path = edited_safetensors("reversed.safetensors", [](nlohmann::json& h) {
    auto& o = h["ln_f.bias"]["data_offsets"];
    o = {o[1], o[0]};
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"ln_f.bias", "begin > end"});
  path = edited_safetensors("dtype.safetensors",
                            [](nlohmann::json& h) { h["ln_f.bias"]["dtype"] = "F31"; });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"ln_f.bias", "'dtype'", "F31"});
  path = edited_safetensors("span.safetensors", [](nlohmann::json& h) {
    h["ln_f.bias"]["shape"] = {8};  // 32 bytes, its offsets span 64
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"ln_f.bias", "data_offsets", "needs 32"});
  path = edited_safetensors("huge_shape.safetensors", [](nlohmann::json& h) {
    h["ln_f.bias"]["shape"] = {1ULL << 40, 1ULL << 40};
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"ln_f.bias", "'shape'", "more elements than 2^64"});
}

TEST(SafetensorsHeader, BadMetadataIsRefusedNamingTheKey) {
  std::string path = edited_safetensors(
      "meta_abc.safetensors", [](nlohmann::json& h) { h["__metadata__"]["n_head"] = "abc"; });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {path.c_str(), "__metadata__", "n_head", "abc", "whole number"});
  path = edited_safetensors("meta_int.safetensors",
                            [](nlohmann::json& h) { h["__metadata__"]["n_head"] = 2; });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"n_head", "must be a string"});
  path = edited_safetensors("meta_pad.safetensors", [](nlohmann::json& h) {
    h["__metadata__"]["padded_vocab_size"] = "999999999999";
  });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {"padded_vocab_size", "999999999999"});
  path = edited_safetensors("meta_heads.safetensors",
                            [](nlohmann::json& h) { h["__metadata__"]["n_head"] = "3"; });
  expect_has(error_of([&] { train::read_gpt2_safetensors_config(path); }),
             {path.c_str(), "divisible"});
}

// Runs fn on another thread and fails (instead of hanging) when it takes over 30 s; a FIFO's
// blocked reader is then released by opening the FIFO for writing.
template <typename Fn>
std::string error_without_blocking(const std::string& fifo, Fn fn) {
  auto result = std::async(std::launch::async, [&] { return error_of(fn); });
  if (result.wait_for(std::chrono::seconds(30)) == std::future_status::timeout) {
    ADD_FAILURE() << "reading '" << fifo << "' blocked";
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  return result.get();
}

TEST(InputFiles, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = path_of("fifo_input");
  const std::string fifo_st = path_of("fifo_input.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(fifo_st.c_str(), 0600), 0);
  expect_has(error_without_blocking(fifo, [&] { train::TrainConfig::load(fifo); }),
             {"config file", fifo.c_str(), "FIFO"});
  expect_has(error_without_blocking(fifo, [&] { train::open_token_shards(fifo); }),
             {"data shard", "FIFO"});
  expect_has(error_without_blocking(fifo, [&] { train::read_checkpoint_config(fifo); }),
             {"checkpoint", "FIFO"});
  expect_has(error_without_blocking(fifo_st, [&] { train::read_gpt2_safetensors_config(fifo_st); }),
             {"safetensors", "FIFO"});
  expect_has(error_without_blocking(fifo, [&] { profile::read_profile(fifo); }),
             {"profile", "FIFO"});
}

TEST(InputFiles, DirectoryIsRefusedClearly) {
  const std::string dir = scratch_dir();
  expect_has(error_of([&] { train::TrainConfig::load(dir); }),
             {"config file", "is a directory, not a regular file"});
  expect_has(error_of([&] { train::read_checkpoint_config(dir); }), {"is a directory"});
}

TEST(JsonInputs, NumberOverflowNamesFileLineAndColumn) {
  const std::string path = path_of("overflow.json");
  write_bytes(path,
              "{\n  \"train_micro_batch_size_per_gpu\": 2,\n  \"gradient_clipping\": 1e400\n}\n");
  expect_has(error_of([&] { train::TrainConfig::load(path); }),
             {path.c_str(), "line 3, column 24", "1e400"});
  write_bytes(path, "{\n  \"tierzero\": {\"steps\": 2,,}\n}\n");
  expect_has(error_of([&] { train::TrainConfig::load(path); }), {path.c_str(), "line 2"});
  const std::string profile = path_of("overflow_profile.json");
  write_bytes(profile, "{\"format\": \"tierzero-profile\",\n \"version\": 1e400}");
  expect_has(error_of([&] { profile::read_profile(profile); }),
             {profile.c_str(), "line 2", "1e400"});
}

// A key given twice in one object was kept last-wins without a word ("seq_len": 16 then 8
// trained at 8): every JSON input refuses it, naming the key and the object holding it.
TEST(JsonInputs, DuplicateKeysAreAnError) {
  const std::string path = path_of("duplicate.json");
  write_bytes(path, R"({"tierzero": {"seq_len": 16, "model": {"n_layer": 1}, "seq_len": 8}})");
  expect_has(error_of([&] { train::TrainConfig::load(path); }),
             {path.c_str(), "'seq_len' twice", "'tierzero'"});
  write_bytes(path, R"({"steps_per_print": 1, "tierzero": {}, "steps_per_print": 2})");
  expect_has(error_of([&] { train::TrainConfig::load(path); }),
             {"'steps_per_print' twice", "top-level object"});
  // The same key in sibling objects is no duplicate.
  write_bytes(path, R"({"zero_optimization": {"offload_param": {"device": "none"},
                        "offload_optimizer": {"device": "none"}}})");
  EXPECT_NO_THROW(train::TrainConfig::load(path));
}

// A document nested a million deep would overflow the stack when nlohmann destroys it: the parse
// stops at the depth limit instead, for every JSON input alike (config, profile, checkpoint).
TEST(JsonInputs, DeepNestingIsAnErrorNotAStackOverflow) {
  const std::string path = path_of("deep.json");
  write_bytes(path, "{\"tierzero\": " + std::string(1000000, '[') + "]}");
  expect_has(error_of([&] { train::TrainConfig::load(path); }),
             {path.c_str(), "nests deeper than 64 levels"});
  const std::string profile = path_of("deep_profile.json");
  write_bytes(profile, std::string(100, '[') + std::string(100, ']'));
  expect_has(error_of([&] { profile::read_profile(profile); }),
             {profile.c_str(), "nests deeper than"});
}

// A damaged timeline names the element it could not read, not nlohmann's "cannot use at() with
// object" or "array index 2 is out of range".
TEST(JsonInputs, ProfileTimelineErrorsNameTheElement) {
  const std::string path = path_of("bad_timeline.json");
  const std::string seed = write_seed_profile(path);
  nlohmann::json j = nlohmann::json::parse(seed);
  ASSERT_TRUE(j.contains("timeline"));
  ASSERT_GE(j["timeline"]["events"].size(), 2u);
  j["timeline"]["events"][1] = nlohmann::json::array({0.5, 0});
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }),
             {path.c_str(), "'timeline.events[1]'", "array of 6 fields"});
  j = nlohmann::json::parse(seed);
  j["timeline"]["activities"][0][3] = 7;
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }), {"'timeline.activities[0]'"});
  j = nlohmann::json::parse(seed);
  j["timeline"] = nlohmann::json::array();
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }), {"'timeline'", "must be an object"});
}

TEST(JsonInputs, ProfileFieldsAreTypedAndRanged) {
  const std::string path = path_of("bad_fields.json");
  const std::string seed = write_seed_profile(path);
  nlohmann::json j = nlohmann::json::parse(seed);
  j["run"]["ranks"] = 2000000000;
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }), {path.c_str(), "'ranks'", "range"});
  j = nlohmann::json::parse(seed);
  j["steps"][0]["counters"]["tokens"] = -5;
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }),
             {"steps[0]", "'tokens' must be a non-negative integer, got -5"});
  j = nlohmann::json::parse(seed);
  j["steps"][0]["phases"][0]["phase"] = "sleeping";
  write_bytes(path, j.dump());
  expect_has(error_of([&] { profile::read_profile(path); }), {path.c_str(), "sleeping"});
}

}  // namespace
}  // namespace tierzero::test
