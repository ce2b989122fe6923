// Training checkpoints: the step directory's files, written durably and atomically, and read back
// with every size, CRC and identity field checked.
#include "tierzero/train/training_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tierzero/core/error.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/offload/crc32c.hpp"

namespace tierzero::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tierzero-checkpoint";
constexpr int kVersion = 1;

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string rank_name(int rank, const char* ext) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.%s", rank, ext);
  return name;
}

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TZ_CHECK(fd >= 0, "cannot open '" + path + "' to sync it: " + std::strerror(errno),
           "check the checkpoint directory's permissions");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  TZ_CHECK(rc == 0, "fsync of '" + path + "' failed: " + std::strerror(err),
           "check the free space and health of the checkpoint's file system");
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  TZ_CHECK(in.good(), "checkpoint file '" + path + "' is missing or unreadable",
           "resume from a complete checkpoint directory (DIR/step-N, or DIR with a 'latest' file)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("checkpoint file '" + path + "' is not valid JSON: " + e.what(),
             "the file is damaged; resume from an older checkpoint");
  }
}

// A rank's shard file exists and has the size its manifest gives.
void check_shard_file(const std::string& bin, uintmax_t want) {
  std::error_code ec;
  const uintmax_t have = fs::file_size(bin, ec);
  TZ_CHECK(!ec, "checkpoint shard '" + bin + "' is missing: " + ec.message(),
           "resume from a complete checkpoint (every rank's rank-N.bin)");
  TZ_CHECK(have == want,
           "checkpoint shard '" + bin + "' has " + std::to_string(have) +
               " bytes, its manifest says " + std::to_string(want) + " (truncated or replaced)",
           "the file is damaged; resume from an older checkpoint");
}

// The step directories under dir, oldest first.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step-", 0) != 0 || name.find('.') != std::string::npos)
      continue;
    try {
      out.emplace_back(std::stoll(name.substr(5)), e.path());
    } catch (const std::exception&) {  // not ours
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

CheckpointWriter::CheckpointWriter(const std::string& dir, int64_t step, int rank,
                                   comm::Communicator* group)
    : dir_(dir),
      tmp_dir_(dir + "/" + step_name(step) + ".tmp"),
      final_dir_(dir + "/" + step_name(step)),
      rank_(rank),
      group_(group) {
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    TZ_CHECK(!ec, "cannot create the checkpoint directory '" + dir + "': " + ec.message(),
             "give --save-dir a writable path");
    fs::remove_all(tmp_dir_, ec);  // a save that died before its rename
    fs::create_directory(tmp_dir_, ec);
    TZ_CHECK(!ec, "cannot create '" + tmp_dir_ + "': " + ec.message(),
             "check that the checkpoint directory is writable");
  }
  if (group) group->barrier();
  const std::string path = tmp_dir_ + "/" + rank_name(rank, "bin");
  file_ = std::fopen(path.c_str(), "wb");
  TZ_CHECK(file_ != nullptr, "cannot create '" + path + "': " + std::strerror(errno),
           "check that the checkpoint directory is writable (on every node)");
}

CheckpointWriter::~CheckpointWriter() {
  if (file_) std::fclose(file_);
}

void CheckpointWriter::add_block(const std::string& name, nlohmann::ordered_json meta,
                                 const void* data, size_t bytes) {
  TZ_CHECK(file_ != nullptr, "checkpoint block '" + name + "' after commit", "internal error");
  const bool ok = bytes == 0 || std::fwrite(data, 1, bytes, file_) == bytes;
  TZ_CHECK(ok,
           "writing block '" + name + "' to '" + tmp_dir_ + "/" + rank_name(rank_, "bin") +
               "' failed: " + std::strerror(errno),
           "check the free space of the checkpoint's file system; the previous checkpoint is "
           "untouched");
  meta["name"] = name;
  meta["offset"] = offset_;
  meta["bytes"] = bytes;
  meta["crc32c"] = offload::crc32c(data, bytes);
  blocks_.push_back(std::move(meta));
  offset_ += bytes;
}

std::string CheckpointWriter::commit(const nlohmann::ordered_json& identity,
                                     const ResumePoint& point, size_t keep_last,
                                     const nlohmann::ordered_json& tensors) {
  const std::string bin = tmp_dir_ + "/" + rank_name(rank_, "bin");
  const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  TZ_CHECK(ok && closed, "writing '" + bin + "' failed: " + std::strerror(err),
           "check the free space of the checkpoint's file system; the previous checkpoint is "
           "untouched");
  nlohmann::ordered_json mine;
  mine["rank"] = rank_;
  mine["file"] = rank_name(rank_, "bin");
  mine["file_bytes"] = offset_;
  mine["data"] = {{"shard", point.data.shard}, {"position", point.data.position}};
  mine["blocks"] = blocks_;
  mine["tensors"] = tensors;
  write_file_atomic(tmp_dir_ + "/" + rank_name(rank_, "json"), mine.dump(1));
  if (group_) group_->barrier();  // every rank's files are durable
  if (rank_ == 0) {
    nlohmann::ordered_json m;
    m["format"] = kFormat;
    m["version"] = kVersion;
    m["step"] = point.step;
    m["optimizer_steps"] = point.steps_taken;
    m["lr_schedule_steps"] = point.lr_schedule_steps;
    m["loss_scaler"] = {{"scale", point.scaler.scale},
                        {"good_steps", point.scaler.good_steps},
                        {"hysteresis_left", point.scaler.hysteresis_left},
                        {"skipped", point.scaler.skipped}};
    m["identity"] = identity;
    write_file_atomic(tmp_dir_ + "/manifest.json", m.dump(1));
    std::error_code ec;
    fs::remove_all(final_dir_, ec);  // a checkpoint of the same step from an earlier run
    fs::rename(tmp_dir_, final_dir_, ec);
    TZ_CHECK(!ec, "cannot rename '" + tmp_dir_ + "' to '" + final_dir_ + "': " + ec.message(),
             "check the checkpoint directory; the previous checkpoint is untouched");
    fsync_path(dir_, true);
    write_file_atomic(dir_ + "/latest", fs::path(final_dir_).filename().string() + "\n");
    if (keep_last > 0) {
      auto all = step_dirs(dir_);
      for (size_t i = 0; i + keep_last < all.size(); ++i) fs::remove_all(all[i].second, ec);
    }
  }
  if (group_) group_->barrier();  // nobody resumes or saves again before the rename
  return final_dir_;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/manifest.json") || !fs::exists(path + "/latest")) return path;
  std::ifstream in(path + "/latest");
  std::string name;
  std::getline(in, name);
  TZ_CHECK(!name.empty(), "'" + path + "/latest' is empty", "give a step directory");
  return path + "/" + name;
}

nlohmann::json read_checkpoint_manifest(const std::string& step_dir) {
  const std::string path = step_dir + "/manifest.json";
  nlohmann::json m = read_json_file(path);
  TZ_CHECK(m.value("format", std::string()) == kFormat && m.value("version", 0) == kVersion,
           "'" + path + "' is not a version-" + std::to_string(kVersion) +
               " TierZero checkpoint manifest",
           "give a directory written by train --save-dir");
  return m;
}

CheckpointReader::CheckpointReader(const std::string& path, int rank,
                                   const nlohmann::ordered_json& identity,
                                   const std::vector<std::string>& layout_keys) {
  dir_ = resolve_checkpoint_dir(path);
  const std::string manifest_path = dir_ + "/manifest.json";
  const nlohmann::json m = read_checkpoint_manifest(dir_);
  try {
    const nlohmann::json& have = m.at("identity");
    for (const auto& [key, want] : identity.items()) {
      const bool same = have.contains(key) && have.at(key) == nlohmann::json(want);
      const bool layout =
          std::find(layout_keys.begin(), layout_keys.end(), key) != layout_keys.end();
      if (layout) {
        same_layout_ = same_layout_ && same;
        continue;
      }
      TZ_CHECK(same,
               "checkpoint '" + dir_ + "' was written with " + key + " = " +
                   (have.contains(key) ? have.at(key).dump() : std::string("(none)")) +
                   ", this run has " + nlohmann::json(want).dump(),
               "resume with the model, precision, batch shape and model-parallel sizes the "
               "checkpoint was written with (the data-parallel world, the ZeRO stage and the "
               "placement may change)");
    }
    point_.step = m.at("step").get<int64_t>();
    point_.steps_taken = m.at("optimizer_steps").get<int64_t>();
    point_.lr_schedule_steps = m.value("lr_schedule_steps", int64_t{0});
    const nlohmann::json& s = m.at("loss_scaler");
    point_.scaler.scale = s.at("scale").get<double>();
    point_.scaler.good_steps = s.at("good_steps").get<int64_t>();
    point_.scaler.hysteresis_left = s.at("hysteresis_left").get<int64_t>();
    point_.scaler.skipped = s.at("skipped").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("checkpoint manifest '" + manifest_path + "' lacks a field: " + e.what(),
             "the file is damaged; resume from an older checkpoint");
  }
  if (!same_layout_) return;  // read by ranges over every rank's files
  const std::string rank_path = dir_ + "/" + rank_name(rank, "json");
  const nlohmann::json r = read_json_file(rank_path);
  try {
    blocks_ = r.at("blocks");
    point_.data.shard = r.at("data").at("shard").get<size_t>();
    point_.data.position = r.at("data").at("position").get<size_t>();
    bin_path_ = dir_ + "/" + r.at("file").get<std::string>();
    check_shard_file(bin_path_, r.at("file_bytes").get<uintmax_t>());
  } catch (const nlohmann::json::exception& e) {
    TZ_THROW("checkpoint manifest '" + rank_path + "' lacks a field: " + e.what(),
             "the file is damaged; resume from an older checkpoint");
  }
  file_ = std::fopen(bin_path_.c_str(), "rb");
  TZ_CHECK(file_ != nullptr, "cannot open '" + bin_path_ + "': " + std::strerror(errno), "");
}

CheckpointReader::~CheckpointReader() {
  if (file_) std::fclose(file_);
}

void CheckpointReader::read_block(const std::string& name, void* data, size_t bytes) {
  TZ_CHECK(next_ < blocks_.size(),
           "checkpoint shard '" + bin_path_ + "' has no block '" + name + "' (it holds " +
               std::to_string(blocks_.size()) + ")",
           "resume with the layout the checkpoint was written with");
  const nlohmann::json& b = blocks_[next_++];
  const std::string have = b.value("name", std::string());
  const size_t have_bytes = b.value("bytes", size_t{0});
  TZ_CHECK(have == name && have_bytes == bytes,
           "checkpoint shard '" + bin_path_ + "': expected block '" + name + "' of " +
               std::to_string(bytes) + " bytes, found '" + have + "' of " +
               std::to_string(have_bytes),
           "resume with the layout the checkpoint was written with");
  const auto offset = b.value("offset", size_t{0});
  const bool ok = std::fseek(file_, static_cast<long>(offset), SEEK_SET) == 0 &&
                  (bytes == 0 || std::fread(data, 1, bytes, file_) == bytes);
  TZ_CHECK(ok, "reading block '" + name + "' of '" + bin_path_ + "' failed", "");
  const uint32_t crc = offload::crc32c(data, bytes);
  TZ_CHECK(crc == b.value("crc32c", uint32_t{0}),
           "checkpoint shard '" + bin_path_ + "': block '" + name + "' (bytes " +
               std::to_string(offset) + "-" + std::to_string(offset + bytes) +
               ") fails its CRC32C check (the data is corrupt)",
           "resume from an older checkpoint");
}

void CheckpointReader::finish() const {
  TZ_CHECK(next_ == blocks_.size(),
           "checkpoint shard '" + bin_path_ + "' holds " + std::to_string(blocks_.size()) +
               " blocks, this run read " + std::to_string(next_),
           "resume with the layout the checkpoint was written with");
}

CheckpointRanges::CheckpointRanges(const std::string& step_dir) {
  std::vector<std::string> manifests;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(step_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank-", 0) == 0 && e.path().extension() == ".json")
      manifests.push_back(e.path().string());
  }
  TZ_CHECK(!ec && !manifests.empty(), "checkpoint '" + step_dir + "' has no rank manifests",
           "resume from a complete checkpoint directory");
  std::sort(manifests.begin(), manifests.end());
  for (const std::string& path : manifests) {
    const nlohmann::json r = read_json_file(path);
    try {
      const std::string bin = step_dir + "/" + r.at("file").get<std::string>();
      check_shard_file(bin, r.at("file_bytes").get<uintmax_t>());
      if (r.at("rank").get<int>() == 0)
        first_data_ = {r.at("data").at("shard").get<size_t>(),
                       r.at("data").at("position").get<size_t>()};
      for (const nlohmann::json& b : r.at("blocks")) {
        if (!b.contains("unit")) continue;  // not a unit's state
        Block blk;
        blk.file = bin;
        blk.unit = b.at("unit").get<std::string>();
        blk.kind = b.at("kind").get<std::string>();
        blk.dtype = b.at("dtype").get<std::string>();
        blk.begin = b.at("begin").get<size_t>();
        blk.elems = b.at("elems").get<size_t>();
        blk.offset = b.at("offset").get<size_t>();
        blk.bytes = b.at("bytes").get<size_t>();
        blk.crc = b.at("crc32c").get<uint32_t>();
        blocks_.push_back(std::move(blk));
      }
    } catch (const nlohmann::json::exception& e) {
      TZ_THROW("checkpoint manifest '" + path + "' lacks a field: " + e.what(),
               "the file is damaged; resume from an older checkpoint");
    }
  }
}

CheckpointRanges::~CheckpointRanges() = default;

const std::vector<uint8_t>& CheckpointRanges::load(const Block& b) {
  if (cached_ == &b) return cache_;
  cached_ = nullptr;
  cache_.resize(b.bytes);
  std::FILE* f = std::fopen(b.file.c_str(), "rb");
  TZ_CHECK(f != nullptr, "cannot open '" + b.file + "': " + std::strerror(errno), "");
  const bool ok = std::fseek(f, static_cast<long>(b.offset), SEEK_SET) == 0 &&
                  (b.bytes == 0 || std::fread(cache_.data(), 1, b.bytes, f) == b.bytes);
  std::fclose(f);
  TZ_CHECK(ok, "reading block '" + b.unit + "." + b.kind + "' of '" + b.file + "' failed", "");
  TZ_CHECK(offload::crc32c(cache_.data(), b.bytes) == b.crc,
           "checkpoint shard '" + b.file + "': block '" + b.unit + "." + b.kind + "' (bytes " +
               std::to_string(b.offset) + "-" + std::to_string(b.offset + b.bytes) +
               ") fails its CRC32C check (the data is corrupt)",
           "resume from an older checkpoint");
  cached_ = &b;
  return cache_;
}

bool CheckpointRanges::read(const std::string& unit, const std::vector<std::string>& kinds,
                            const std::string& dtype, size_t begin, size_t count, void* dst) {
  for (const std::string& kind : kinds) {
    std::vector<const Block*> found;
    for (const Block& b : blocks_)
      if (b.unit == unit && b.kind == kind && b.dtype == dtype) found.push_back(&b);
    if (found.empty()) continue;
    const size_t eb = found.front()->bytes / std::max<size_t>(found.front()->elems, 1);
    auto* out = static_cast<uint8_t*>(dst);
    std::memset(out, 0, count * eb);  // padding no block reaches
    // Replicas (every rank's full parameters below stage 3) cover the same range: read one.
    std::vector<char> filled(count, 0);  // (count)
    for (const Block* b : found) {
      const size_t lo = std::max(begin, b->begin),
                   hi = std::min(begin + count, b->begin + b->elems);
      if (lo >= hi || std::all_of(filled.begin() + static_cast<std::ptrdiff_t>(lo - begin),
                                  filled.begin() + static_cast<std::ptrdiff_t>(hi - begin),
                                  [](char c) { return c != 0; }))
        continue;
      const std::vector<uint8_t>& data = load(*b);
      std::memcpy(out + (lo - begin) * eb, data.data() + (lo - b->begin) * eb, (hi - lo) * eb);
      std::fill(filled.begin() + static_cast<std::ptrdiff_t>(lo - begin),
                filled.begin() + static_cast<std::ptrdiff_t>(hi - begin), 1);
    }
    return true;
  }
  return false;
}

namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
// The first signal asks for a clean stop; a second one (an impatient Ctrl-C) ends the process at
// once, as it would have without the handler.
extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
}
}  // namespace

StopSignals::StopSignals(bool install) {
  if (!install) return;
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  TZ_CHECK(sigaction(SIGTERM, &sa, &old_[0]) == 0 && sigaction(SIGINT, &sa, &old_[1]) == 0,
           std::string("cannot install the SIGTERM/SIGINT handlers: ") + std::strerror(errno), "");
  installed_ = true;
}

StopSignals::~StopSignals() {
  if (installed_) {
    sigaction(SIGTERM, &old_[0], nullptr);
    sigaction(SIGINT, &old_[1], nullptr);
  }
}

bool StopSignals::requested() {
  return g_stop_signal != 0;
}

int StopSignals::signal() {
  return static_cast<int>(g_stop_signal);
}

}  // namespace tierzero::train
