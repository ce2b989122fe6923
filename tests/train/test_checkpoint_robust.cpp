// Training checkpoints against hostile files (issue 28): a checkpoint missing a rank's files or
// leaving a gap in a unit's range is refused naming what is missing; every forged manifest or rank
// file field is an Error naming the file, the field and what was expected; rotation keeps what
// it just wrote and what `latest` names and removes only complete checkpoints of ours, in the
// order they were written; a save directory is locked by one run at a time.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "checkpoint_fixture.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/train/checkpoint_contents.hpp"
#include "tierzero/train/checkpoint_save_dir.hpp"

using namespace tierzero;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spill(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A copy of `dir` whose file `name` is rewritten by `edit` (the JSON as text).
std::string forged(const std::string& dir, const std::string& name,
                   const std::function<void(std::string&)>& edit) {
  static int n = 0;
  const std::string copy = tz_test::scratch_dir("forged" + std::to_string(n++)) + "/step-00000003";
  fs::copy(dir, copy, fs::copy_options::recursive);
  std::string text = slurp(copy + "/" + name);
  edit(text);
  spill(copy + "/" + name, text);
  return copy;
}

// The JSON of `text` with the value at `pointer` replaced by the literal `value` (any text).
void set_literal(std::string& text, const std::string& pointer, const std::string& value) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
  j[nlohmann::ordered_json::json_pointer(pointer)] = "@@FUZZ@@";
  text = j.dump(1);
  text.replace(text.find("\"@@FUZZ@@\""), 10, value);
}

// The message of the Error open_checkpoint throws (fails the test when it throws none).
std::string open_error(const std::string& dir) {
  try {
    train::open_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "'" << dir << "' was accepted";
  return "";
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(CheckpointRobust, MissingRankFilesAreRefusedNamingTheRank) {
  const std::string dir =
      tz_test::write_two_rank_checkpoint(tz_test::scratch_dir("two") + "/ck", 3);
  EXPECT_NO_THROW(train::open_checkpoint(dir));
  const nlohmann::ordered_json identity =
      nlohmann::ordered_json::parse(slurp(dir + "/manifest.json"))["identity"];
  for (const char* gone : {"rank-00001.json", "rank-00001.bin"}) {
    const std::string copy = forged(dir, "manifest.json", [](std::string&) {});
    fs::remove(copy + "/" + gone);
    const std::string e = open_error(copy);
    std::printf("%s removed: %s\n", gone, e.c_str());
    EXPECT_TRUE(has(e, "lacks rank 1's files") && has(e, gone)) << e;
    // Resuming (rank 0 of the same layout, or in another layout) and export's reader refuse too.
    EXPECT_THROW(train::CheckpointReader(copy, 0, identity), Error);
    EXPECT_THROW(train::CheckpointReader(copy, 0, identity, {"ranks", "dp"}), Error);
    EXPECT_THROW(train::CheckpointRanges{copy}, Error);
  }
}

TEST(CheckpointRobust, GapsAndOverlapsBetweenRanksAreRefusedNamingTheRange) {
  const std::string dir =
      tz_test::write_two_rank_checkpoint(tz_test::scratch_dir("cover") + "/ck", 3);
  // Rank 1's shard of u0 is [50, 100): moved to 60 it leaves [50, 60) uncovered; to 40, it
  // overlaps rank 0's [0, 50).
  const std::string gap = open_error(forged(
      dir, "rank-00001.json", [](std::string& t) { set_literal(t, "/blocks/1/begin", "60"); }));
  std::printf("gap: %s\n", gap.c_str());
  EXPECT_TRUE(has(gap, "unit 'u0' param_shard") && has(gap, "[50, 60) are in no rank's file"))
      << gap;
  const std::string overlap = open_error(forged(
      dir, "rank-00001.json", [](std::string& t) { set_literal(t, "/blocks/1/begin", "40"); }));
  std::printf("overlap: %s\n", overlap.c_str());
  EXPECT_TRUE(has(overlap, "rank 1's range [40, 90) overlaps rank 0's [0, 50)")) << overlap;
  // A unit's tail past every rank's blocks (the tensors say it has 120 elements).
  const std::string tail = open_error(forged(
      dir, "rank-00000.json", [](std::string& t) { set_literal(t, "/tensors/0/shape/0", "120"); }));
  EXPECT_TRUE(has(tail, "[100, 120) of the unit's 120 are in no rank's file")) << tail;
}

TEST(CheckpointRobust, ForgedFieldsNameTheFileTheFieldAndTheExpectedRange) {
  const std::string dir =
      tz_test::write_two_rank_checkpoint(tz_test::scratch_dir("fields") + "/ck", 3);
  struct Case {
    const char* file;
    const char* pointer;
    const char* value;
    const char* expect;  // in the message
  };
  const Case cases[] = {
      {"manifest.json", "/optimizer_steps", "4611686018427387904",
       "field 'optimizer_steps' is 4611686018427387904; expected an integer in [0, 3]"},
      {"manifest.json", "/optimizer_steps", "2", "field 'optimizer_steps' is 2; expected 3"},
      {"manifest.json", "/step", "-5", "field 'step' is -5; expected an integer in [0, "},
      {"manifest.json", "/step", "4", "field 'step' is 4; expected 3, the step its directory"},
      {"manifest.json", "/step", "2.5", "field 'step' is 2.5; expected an integer"},
      {"manifest.json", "/step", "\"3\"", "field 'step' is \"3\"; expected an integer"},
      {"manifest.json", "/step", "1e400", "a number beyond the range of a double"},
      {"manifest.json", "/step", "18446744073709551616", "field 'step' is 1.8446744073709552e+19"},
      {"manifest.json", "/loss_scaler/scale", "-1", "field 'loss_scaler.scale' is -1"},
      {"manifest.json", "/identity/ranks", "1",
       "field 'identity.dp' is 2; expected an integer in [1, 1]"},
      {"manifest.json", "/identity/ranks", "1048577", "field 'identity.ranks' is 1048577"},
      {"manifest.json", "/identity/dp", "0", "field 'identity.dp' is 0"},
      {"manifest.json", "/format", "\"other\"", "field 'format' is \"other\""},
      {"rank-00001.json", "/blocks/0/offset", "-1",
       "field 'blocks[0].offset' is -1; expected an integer in [0, "},
      {"rank-00001.json", "/blocks/1/offset", "8", "field 'blocks[1].offset' is 8; expected 400"},
      {"rank-00001.json", "/blocks/5/bytes", "1000000",
       "field 'blocks[5].bytes' is 1000000; expected an integer in [0, 76]"},
      {"rank-00001.json", "/blocks/0/elems", "4611686018427387904",
       "field 'blocks[0].elems' is 4611686018427387904"},
      {"rank-00001.json", "/blocks/0/dtype", "\"int8\"", "field 'blocks[0].dtype' is \"int8\""},
      {"rank-00001.json", "/blocks/0/crc32c", "4294967296", "field 'blocks[0].crc32c'"},
      {"rank-00001.json", "/file", "\"../rank-00000.bin\"",
       "field 'file' is \"../rank-00000.bin\""},
      {"rank-00001.json", "/rank", "0", "field 'rank' is 0; expected an integer in [1, 1]"},
      {"rank-00001.json", "/data/position", "-3", "field 'data.position' is -3"},
      {"rank-00001.json", "/tensors/0/shape", "[1099511627776, 1099511627776]",
       "field 'tensors[0].shape' is [1099511627776,1099511627776]; expected at most"},
      {"rank-00001.json", "/blocks", "{}", "field 'blocks' is {}; expected a JSON array"},
  };
  for (const Case& c : cases) {
    const std::string copy =
        forged(dir, c.file, [&](std::string& t) { set_literal(t, c.pointer, c.value); });
    const std::string e = open_error(copy);
    std::printf("%s %s = %s: %s\n", c.file, c.pointer, c.value, e.c_str());
    EXPECT_TRUE(has(e, c.expect)) << c.pointer << " = " << c.value << ": " << e;
    EXPECT_TRUE(has(e, copy)) << "the message names no file: " << e;
  }
}

TEST(CheckpointRobust, RotationKeepsWhatItWroteAndRemovesOnlyOurCheckpoints) {
  const std::string save = tz_test::scratch_dir("rotate") + "/ck";
  tz_test::train_checkpoint(save, 0, 4, 2);  // steps 2 and 4, latest step 4
  ASSERT_TRUE(fs::is_directory(save + "/step-00000002") &&
              fs::is_directory(save + "/step-00000004"));
  // Not ours: a directory named unlike ours, one without a manifest, a file.
  fs::create_directories(save + "/step-0000000");
  fs::create_directories(save + "/step-00000009");
  spill(save + "/step-00000009/notes.txt", "mine");
  spill(save + "/notes.txt", "mine");
  // Where the run will save step 3: not a checkpoint, so moved aside, not deleted.
  fs::create_directories(save + "/step-00000003");
  spill(save + "/step-00000003/notes.txt", "mine too");
  // Resumed from step 2 with --keep-last 1: the run saves step 3, which must stay and be latest;
  // step 4 (the abandoned run's) and step 2 go, written before it.
  train::TrainConfig c = tz_test::tiny_run(0, 3);
  c.checkpoint.save_dir = save;
  c.checkpoint.resume = save + "/step-00000002";
  c.checkpoint.keep_last = 1;
  train::Trainer(c).run(nullptr);
  std::string left;
  for (const auto& e : fs::directory_iterator(save)) left += e.path().filename().string() + " ";
  std::printf("left: %s\n", left.c_str());
  EXPECT_EQ(slurp(save + "/latest"), "step-00000003\n");
  EXPECT_TRUE(fs::is_directory(save + "/step-00000003"));
  EXPECT_NO_THROW(train::open_checkpoint(train::resolve_checkpoint_dir(save)));
  EXPECT_FALSE(fs::exists(save + "/step-00000002"));
  EXPECT_FALSE(fs::exists(save + "/step-00000004"));
  EXPECT_TRUE(fs::is_directory(save + "/step-0000000"));
  EXPECT_EQ(slurp(save + "/step-00000009/notes.txt"), "mine");
  EXPECT_EQ(slurp(save + "/notes.txt"), "mine");
  size_t moved = 0;
  for (const auto& e : fs::directory_iterator(save))
    moved += e.path().filename().string().rfind("step-00000003.moved-", 0) == 0 &&
             slurp(e.path().string() + "/notes.txt") == "mine too";
  EXPECT_EQ(moved, 1u) << "the directory in the way of step 3 was not moved aside whole";

  // --keep-last 2 keeps the two written last: after steps 2, 4 and then 3 (resumed from 2), those
  // are 4 and 3.
  const std::string save2 = tz_test::scratch_dir("rotate2") + "/ck";
  tz_test::train_checkpoint(save2, 0, 4, 2);
  c.checkpoint.save_dir = save2;
  c.checkpoint.resume = save2 + "/step-00000002";
  c.checkpoint.keep_last = 2;
  train::Trainer(c).run(nullptr);
  EXPECT_EQ(slurp(save2 + "/latest"), "step-00000003\n");
  EXPECT_TRUE(fs::is_directory(save2 + "/step-00000004"));
  EXPECT_FALSE(fs::exists(save2 + "/step-00000002"));

  // Saving a step the directory already holds (resumed from 2, run to 4 again) replaces it whole.
  c.steps = 4;
  c.checkpoint.keep_last = 0;
  c.checkpoint.save_every = 0;
  c.checkpoint.resume = save2 + "/step-00000003";
  train::Trainer(c).run(nullptr);
  EXPECT_EQ(slurp(save2 + "/latest"), "step-00000004\n");
  EXPECT_NO_THROW(train::open_checkpoint(save2 + "/step-00000004"));
  EXPECT_FALSE(fs::exists(save2 + "/step-00000004.tmp"));
}

TEST(CheckpointRobust, ASaveDirectoryIsLockedByOneRunAndAStaleLockIsTakenOver) {
  const std::string save = tz_test::scratch_dir("lock") + "/ck";
  const std::string lock = train::save_dir_lock_path(save);
  {
    const train::SaveDirLock first(save, 0, nullptr);
    // A second holder (its own open file, as another process would have) is refused.
    try {
      train::SaveDirLock second(save, 0, nullptr);
      FAIL() << "a second lock on the same directory was granted";
    } catch (const Error& e) {
      std::printf("refused: %s\n", e.what());
      EXPECT_TRUE(has(e.what(), lock) && has(e.what(), "pid " + std::to_string(::getpid())))
          << e.what();
    }
    // A run that saves there is refused before its first step.
    train::TrainConfig c = tz_test::tiny_run(0, 2);
    c.checkpoint.save_dir = save;
    EXPECT_THROW(train::Trainer(c).run(nullptr), Error);
    EXPECT_FALSE(fs::exists(save + "/step-00000002"));
  }
  EXPECT_EQ(slurp(lock), "") << "the owner is cleared on release";
  // A lock file naming a process of this host that is gone is taken over.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  spill(lock, "host=" + std::string(host) + "\npid=" + std::to_string(child) + "\n");
  EXPECT_NO_THROW(train::SaveDirLock(save, 0, nullptr));
  // Garbage in the lock file is no owner.
  spill(lock, std::string(10000, '\xff'));
  EXPECT_NO_THROW(train::SaveDirLock(save, 0, nullptr));
}
