// Ranks comparing their run's settings at start-up. Everything travels as f32 values of 16 bits
// each (every integer below 2^24 is exact in f32), because the world group reduces and
// broadcasts the float types only; and every exchange has a size all ranks know before it, so a
// rank launched with other settings can neither truncate nor stall another's receive.
#include "tierzero/train/rank_agreement.hpp"

#include "tierzero/core/error_report.hpp"

#include <array>
#include <cstdint>
#include <vector>

namespace tierzero::train {

namespace {

using Packed64 = std::array<float, 4>;  // (4) 16 bits each, most significant first

Packed64 pack64(uint64_t v) {
  Packed64 out{};
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<float>((v >> (48 - 16 * i)) & 0xffff);
  return out;
}

uint64_t unpack64(const float* parts) {  // parts (4)
  uint64_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 16) | (static_cast<uint64_t>(parts[i]) & 0xffff);
  return v;
}

// `root`'s text on every rank: its length, then its bytes two to a value.
std::string broadcast_text(comm::Communicator& world, const std::string& mine, int root) {
  const bool is_root = world.rank() == root;
  Packed64 length = pack64(is_root ? mine.size() : 0);
  world.broadcast(length.data(), length.size(), DType::f32, root);
  const size_t bytes = unpack64(length.data());
  std::vector<float> words((bytes + 1) / 2);  // (ceil(bytes / 2)) 16 bits each
  if (is_root)
    for (size_t i = 0; i < bytes; ++i) {
      const auto byte = static_cast<unsigned char>(mine[i]);
      words[i / 2] += static_cast<float>(i % 2 == 0 ? byte << 8 : byte);
    }
  if (!words.empty()) world.broadcast(words.data(), words.size(), DType::f32, root);
  std::string text(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) {
    const auto word = static_cast<unsigned>(words[i / 2]);
    text[i] = static_cast<char>(i % 2 == 0 ? (word >> 8) & 0xff : word & 0xff);
  }
  return text;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

void require_ranks_agree(const RunSettings& mine, comm::Communicator& world) {
  const int ranks = world.size();
  if (ranks <= 1) return;
  const std::string text = settings_text(mine);
  const Packed64 digest = pack64(settings_digest(text));
  std::vector<float> digests(digest.size() * static_cast<size_t>(ranks));  // (ranks, 4)
  world.all_gather(digest.data(), digests.data(), digest.size(), DType::f32);
  const uint64_t reference = unpack64(digests.data());
  std::vector<int> differing;
  for (int r = 1; r < ranks; ++r)
    if (unpack64(digests.data() + digest.size() * static_cast<size_t>(r)) != reference)
      differing.push_back(r);
  if (differing.empty()) return;

  // Every rank learns both lists, so that every rank's error says the same.
  const int other = differing.front();
  const RunSettings first = parse_settings_text(broadcast_text(world, text, 0));
  const RunSettings theirs = parse_settings_text(broadcast_text(world, text, other));
  const std::optional<size_t> at = first_difference(first, theirs);
  std::string what = "ranks disagree on the run's settings: ";
  what += at ? describe_difference(first, 0, theirs, other, *at)
             : "their digests differ but no setting does";
  if (differing.size() > 1)
    what +=
        "; ranks " + rank_list(differing) + " of " + std::to_string(ranks) + " differ from rank 0";
  throw SameOnEveryRankError(
      Error(what, error_location(__FILE__, __LINE__),
            "launch every rank with the same config file and flags; in an MPMD launch "
            "(mpiexec -n 1 A : -n 1 B) A and B must agree"),
      world.rank() == 0);
}

std::vector<float> rank_failures(bool failed, int rank, comm::Communicator* group) {
  const size_t ranks = group ? static_cast<size_t>(group->size()) : 1;
  std::vector<float> mine(ranks, 0.0f), all(ranks, 0.0f);  // (ranks)
  mine[static_cast<size_t>(rank)] = failed ? 1.0f : 0.0f;
  if (!group) return mine;
  group->all_reduce(mine.data(), all.data(), ranks, DType::f32, comm::ReduceOp::sum);
  return all;
}

void throw_if_any_rank_failed(const std::string& my_problem, int rank, comm::Communicator* group) {
  const std::vector<float> all = rank_failures(!my_problem.empty(), rank, group);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r] == 0.0f) continue;
    const bool reports = r == static_cast<size_t>(rank);
    throw SameOnEveryRankError(
        Error(reports ? my_problem : "rank " + std::to_string(r) + " reports an error", ""),
        reports);
  }
}

}  // namespace tierzero::train
