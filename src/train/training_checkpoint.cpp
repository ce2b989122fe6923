// Training checkpoints: the step directory's files, written durably and atomically, and read back
// with every size, CRC and identity field checked.
#include "tierzero/train/training_checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/output_files.hpp"
#include "tierzero/offload/crc32c.hpp"
#include "tierzero/train/checkpoint_contents.hpp"
#include "tierzero/train/checkpoint_save_dir.hpp"

namespace tierzero::train {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tierzero-checkpoint";
constexpr int kVersion = 1;

std::string rank_name(int rank, const char* ext) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.%s", rank, ext);
  return name;
}

// Whether `path` is a complete checkpoint of ours (which a save of its step may replace).
bool is_our_checkpoint(const std::string& path) {
  try {
    open_checkpoint(path);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Puts the written directory `from` in place as `to`. When `to` is a checkpoint (this step saved
// by an earlier run) the two are exchanged atomically, so `latest`, which may name it, never
// dangles; anything else there is not ours to delete, and is moved aside with a warning.
void move_into_place(const std::string& from, const std::string& to) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(to)) && !is_our_checkpoint(to)) {
    const std::string aside = to + ".moved-" +
                              std::to_string(std::chrono::system_clock::now().time_since_epoch() /
                                             std::chrono::seconds(1));
    fs::rename(to, aside, ec);
    TZ_CHECK(!ec,
             "'" + to + "' is in the way of this checkpoint and cannot be moved: " + ec.message(),
             "move it out of the save directory");
    log::warn("'" + to + "' was not a checkpoint; moved it to '" + aside +
              "' to save this step there");
  }
  if (fs::exists(to)) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(from, ec);  // now the earlier run's
      return;
    }
    fs::remove_all(to, ec);  // a file system without the exchange
  }
  fs::rename(from, to, ec);
  TZ_CHECK(!ec, "cannot rename '" + from + "' to '" + to + "': " + ec.message(),
           "check the checkpoint directory; the previous checkpoint is untouched");
}

}  // namespace

CheckpointWriter::CheckpointWriter(const std::string& dir, int64_t step, int rank,
                                   comm::Communicator* group)
    : dir_(dir),
      tmp_dir_(dir + "/" + checkpoint_step_name(step) + ".tmp"),
      final_dir_(dir + "/" + checkpoint_step_name(step)),
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
    // The order checkpoints were written in, which rotation follows (not their steps: a resumed
    // run may save steps below an abandoned run's).
    m["saved_at_ns"] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
    write_file_atomic(tmp_dir_ + "/manifest.json", m.dump(1));
    move_into_place(tmp_dir_, final_dir_);
    fsync_directory(dir_);
    const std::string name = fs::path(final_dir_).filename().string();
    write_file_atomic(dir_ + "/latest", name + "\n");
    rotate_checkpoints(dir_, name, keep_last);
  }
  if (group_) group_->barrier();  // nobody resumes or saves again before the rename
  return final_dir_;
}

std::string resolve_checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/manifest.json") || !fs::exists(path + "/latest")) return path;
  // `latest` holds one step directory's name (read bounded: it may be anything).
  const std::string latest = path + "/latest";
  char buf[128] = {};
  std::FILE* f = std::fopen(latest.c_str(), "rb");
  TZ_CHECK(f != nullptr, "cannot read '" + latest + "': " + std::strerror(errno), "");
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string name(buf, n);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  // What it holds, printable: a binary file's bytes would garble the terminal.
  std::string shown;
  for (const char ch : name.substr(0, 40))
    shown += std::isprint(static_cast<unsigned char>(ch)) ? std::string(1, ch) : std::string("?");
  TZ_CHECK(checkpoint_step_of(name) >= 0,
           "'" + latest + "' holds \"" + shown + "\", not the name of a step directory (step-<N>)",
           "give a step directory (DIR/step-<N>) to resume from");
  TZ_CHECK(fs::is_directory(path + "/" + name),
           "'" + latest + "' names '" + name + "', which is not in '" + path + "'",
           "give one of its step directories (DIR/step-<N>) to resume from");
  return path + "/" + name;
}

CheckpointReader::CheckpointReader(const std::string& path, int rank,
                                   const nlohmann::ordered_json& identity,
                                   const std::vector<std::string>& layout_keys) {
  dir_ = resolve_checkpoint_dir(path);
  // Every rank's files are checked whole before any state is read: a checkpoint missing a rank,
  // or one whose ranges leave a gap, is refused here.
  const CheckpointContents c = open_checkpoint(dir_);
  const nlohmann::json& have = c.manifest.identity;
  for (const auto& [key, want] : identity.items()) {
    const bool same = have.contains(key) && have.at(key) == nlohmann::json(want);
    const bool layout = std::find(layout_keys.begin(), layout_keys.end(), key) != layout_keys.end();
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
  point_.step = c.manifest.step;
  point_.steps_taken = c.manifest.optimizer_steps;
  point_.lr_schedule_steps = c.manifest.lr_schedule_steps;
  point_.scaler = c.manifest.scaler;
  if (!same_layout_) return;  // read by ranges over every rank's files
  TZ_CHECK(rank >= 0 && static_cast<size_t>(rank) < c.ranks.size(),
           "checkpoint '" + dir_ + "' has " + std::to_string(c.ranks.size()) +
               " ranks' files, none of rank " + std::to_string(rank),
           "resume with the world the checkpoint was written with");
  const CheckpointRankFile& mine = c.ranks[static_cast<size_t>(rank)];
  blocks_ = mine.blocks;
  point_.data = mine.data;
  bin_path_ = mine.bin_path;
  file_ = std::fopen(bin_path_.c_str(), "rb");
  TZ_CHECK(file_ != nullptr, "cannot open '" + bin_path_ + "': " + std::strerror(errno), "");
}

CheckpointReader::~CheckpointReader() {
  if (file_) std::fclose(file_);
}

namespace {

bool is_optimizer_block(const std::string& name) {
  const auto ends_with = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with(".adam_m") || ends_with(".adam_v");
}

}  // namespace

// Passes the moment blocks ahead when the run wants another block there (`wanted`), or, at the
// end (null), when it passed moments before.
void CheckpointReader::pass_optimizer_blocks(const std::string* wanted) {
  const bool pass = wanted ? !is_optimizer_block(*wanted) : passed_optimizer_state_;
  while (pass && next_ < blocks_.size() && is_optimizer_block(blocks_[next_].name) &&
         (wanted == nullptr || blocks_[next_].name != *wanted)) {
    ++next_;
    passed_optimizer_state_ = true;
  }
}

void CheckpointReader::read_block(const std::string& name, void* data, size_t bytes) {
  pass_optimizer_blocks(&name);
  TZ_CHECK(next_ < blocks_.size(),
           "checkpoint shard '" + bin_path_ + "' has no block '" + name + "' (it holds " +
               std::to_string(blocks_.size()) + ")",
           "resume with the layout the checkpoint was written with");
  const CheckpointBlock& b = blocks_[next_++];
  TZ_CHECK(b.name == name && b.bytes == bytes,
           "checkpoint shard '" + bin_path_ + "': expected block '" + name + "' of " +
               std::to_string(bytes) + " bytes, found '" + b.name + "' of " +
               std::to_string(b.bytes),
           "resume with the layout the checkpoint was written with");
  // The offset lies within the file (checked against its size when the manifest was read).
  const bool ok = ::fseeko(file_, static_cast<off_t>(b.offset), SEEK_SET) == 0 &&
                  (bytes == 0 || std::fread(data, 1, bytes, file_) == bytes);
  TZ_CHECK(ok,
           "reading block '" + name + "' (bytes " + std::to_string(b.offset) + "-" +
               std::to_string(b.offset + bytes) + ") of '" + bin_path_ +
               "' failed: " + (std::ferror(file_) ? std::strerror(errno) : "the file ends early"),
           "the file changed while it was read, or is damaged; resume from an older checkpoint");
  TZ_CHECK(offload::crc32c(data, bytes) == b.crc,
           "checkpoint shard '" + bin_path_ + "': block '" + name + "' (bytes " +
               std::to_string(b.offset) + "-" + std::to_string(b.offset + bytes) +
               ") fails its CRC32C check (the data is corrupt)",
           "resume from an older checkpoint");
}

void CheckpointReader::finish() {
  pass_optimizer_blocks(nullptr);
  TZ_CHECK(next_ == blocks_.size(),
           "checkpoint shard '" + bin_path_ + "' holds " + std::to_string(blocks_.size()) +
               " blocks, this run read " + std::to_string(next_),
           "resume with the layout the checkpoint was written with");
}

CheckpointRanges::CheckpointRanges(const std::string& step_dir)
    : CheckpointRanges(open_checkpoint(step_dir)) {}

CheckpointRanges::CheckpointRanges(const CheckpointContents& c) {
  first_data_ = c.ranks.front().data;
  for (const CheckpointRankFile& r : c.ranks)
    for (const CheckpointBlock& b : r.blocks) {
      Block blk;
      blk.file = r.bin_path;
      blk.unit = b.unit;
      blk.kind = b.kind;
      blk.dtype = b.dtype;
      blk.tp_rank = static_cast<size_t>(r.tp_rank);
      blk.begin = b.begin;
      blk.elems = b.elems;
      blk.offset = b.offset;
      blk.bytes = b.bytes;
      blk.crc = b.crc;
      blocks_.push_back(std::move(blk));
    }
  size_t tp = 1;
  for (const CheckpointRankFile& r : c.ranks) tp = std::max(tp, static_cast<size_t>(r.tp_rank) + 1);
  cached_.assign(tp, nullptr);
  cache_.resize(tp);
}

CheckpointRanges::~CheckpointRanges() = default;

const std::vector<uint8_t>& CheckpointRanges::load(const Block& b) {
  std::vector<uint8_t>& cache = cache_[b.tp_rank];
  if (cached_[b.tp_rank] == &b) return cache;
  cached_[b.tp_rank] = nullptr;
  if (cache.capacity() < b.bytes) std::vector<uint8_t>().swap(cache);  // never two at once
  cache.resize(b.bytes);  // within the file's size (checked when the manifest was read)
  std::FILE* f = std::fopen(b.file.c_str(), "rb");
  TZ_CHECK(f != nullptr, "cannot open '" + b.file + "': " + std::strerror(errno), "");
  const bool ok = ::fseeko(f, static_cast<off_t>(b.offset), SEEK_SET) == 0 &&
                  (b.bytes == 0 || std::fread(cache.data(), 1, b.bytes, f) == b.bytes);
  std::fclose(f);
  TZ_CHECK(ok,
           "reading block '" + b.unit + "." + b.kind + "' (bytes " + std::to_string(b.offset) +
               "-" + std::to_string(b.offset + b.bytes) + ") of '" + b.file + "' failed",
           "the file changed while it was read, or is damaged; resume from an older checkpoint");
  TZ_CHECK(offload::crc32c(cache.data(), b.bytes) == b.crc,
           "checkpoint shard '" + b.file + "': block '" + b.unit + "." + b.kind + "' (bytes " +
               std::to_string(b.offset) + "-" + std::to_string(b.offset + b.bytes) +
               ") fails its CRC32C check (the data is corrupt)",
           "resume from an older checkpoint");
  cached_[b.tp_rank] = &b;
  return cache;
}

bool CheckpointRanges::read(const std::string& unit, const std::vector<std::string>& kinds,
                            const std::string& dtype, size_t begin, size_t count, void* dst,
                            size_t tp_rank) {
  for (const std::string& kind : kinds) {
    std::vector<const Block*> found;
    for (const Block& b : blocks_)
      if (b.unit == unit && b.kind == kind && b.dtype == dtype && b.tp_rank == tp_rank)
        found.push_back(&b);
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
