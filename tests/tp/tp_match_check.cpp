// Checks for the tensor- and pipeline-parallel end-to-end tests (run_tp_match.sh):
//   checkpoints <reference> <candidate> <atol> <rtol>: two llm.c checkpoints (256-int header,
//     then fp32 parameters) hold the same model and every parameter agrees within
//     atol + rtol * |reference|; prints the max absolute and relative error.
//   param-ratio <reference memory json> <candidate memory json> <max ratio>: the candidate
//     rank's parameter bytes (every tier, peak) over the reference's are at most max ratio.
//   pipeline-activations <memory json> <ranks>: every rank's micro-batches in flight are its
//     pipeline schedule's bound and its measured activation peak is exactly what they hold.
//   pipeline-profile <memory json> <profile json> <ranks>: every rank's profile shows its
//     stage's forwards, backwards and receive waits in every step.
//   collective-bytes <metrics jsonl> <profile json>: rank 0's profile (kept with
//     --profile-timeline) carries every tensor-parallel and Ulysses collective on its network
//     link, the bytes of its "tp ..." and "ulysses all_to_all" activities those the metrics
//     count over the run.
//   ulysses-activations <reference memory json> <memory json> <ranks> <max ratio>: every Ulysses
//     rank's measured activation peak is exactly the model's count for its slice, and at most
//     max ratio of one rank's for the same micro-batch; with the reference at that micro-batch
//     (its peak equal to the one-rank count), the ratio is measured against measured.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

bool read_file(const char* path, std::vector<char>& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

int compare_checkpoints(const char* ref_path, const char* cand_path, double atol, double rtol) {
  std::vector<char> ref, cand;
  if (!read_file(ref_path, ref) || !read_file(cand_path, cand)) {
    std::fprintf(stderr, "cannot read %s or %s\n", ref_path, cand_path);
    return 2;
  }
  constexpr size_t kHeader = 256 * sizeof(int32_t);
  if (ref.size() != cand.size() || ref.size() < kHeader ||
      std::string(ref.data(), kHeader) != std::string(cand.data(), kHeader)) {
    std::fprintf(stderr, "checkpoints differ in size (%zu vs %zu bytes) or header\n", ref.size(),
                 cand.size());
    return 1;
  }
  const size_t n = (ref.size() - kHeader) / sizeof(float);
  std::vector<float> a(n), b(n);  // (n) parameters
  std::copy_n(ref.data() + kHeader, n * sizeof(float), reinterpret_cast<char*>(a.data()));
  std::copy_n(cand.data() + kHeader, n * sizeof(float), reinterpret_cast<char*>(b.data()));
  double max_abs = 0.0, max_rel = 0.0;
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    const double r = d / std::max(std::fabs(static_cast<double>(a[i])), 1e-30);
    if (d > max_abs) {
      max_abs = d;
      worst = i;
    }
    if (d > 0.0 && r > max_rel) max_rel = r;
    if (!(d <= atol + rtol * std::fabs(static_cast<double>(a[i])))) ++bad;
  }
  std::printf(
      "final parameters: %zu values, max abs error %.3g (at %zu: %.9g vs %.9g), max rel "
      "error %.3g, %zu outside %g + %g |ref|\n",
      n, max_abs, worst, static_cast<double>(a[worst]), static_cast<double>(b[worst]), max_rel, bad,
      atol, rtol);
  return bad == 0 ? 0 : 1;
}

double param_bytes(const char* path) {
  std::ifstream in(path);
  if (!in) return -1.0;
  const nlohmann::json j = nlohmann::json::parse(in);
  double total = 0.0;
  for (const auto& [tier, cats] : j.at("tiers").items())
    total += cats.at("param").at("peak").get<double>();
  return total;
}

int param_ratio(const char* ref_path, const char* cand_path, double max_ratio) {
  const double ref = param_bytes(ref_path), cand = param_bytes(cand_path);
  if (ref <= 0.0 || cand < 0.0) {
    std::fprintf(stderr, "cannot read parameter bytes from %s or %s\n", ref_path, cand_path);
    return 2;
  }
  std::printf(
      "parameter bytes per rank: reference %.0f, tensor-parallel %.0f, ratio %.4f (at "
      "most %.4f)\n",
      ref, cand, cand / ref, max_ratio);
  return cand / ref <= max_ratio ? 0 : 1;
}

// Every rank's memory file (the path, then path.rankR) of a pipeline-parallel run: the
// micro-batches its executor keeps in flight are the schedule's bound, computed here from the
// schedule's definition (GPipe: all m; 1F1B: the p - stage warm-up and steady micro-batches, at
// most m), and the tracker's measured activation peak is exactly the model's scratch plus that
// many of the stage's micro-batch activations.
int pipeline_activations(const char* path, int ranks) {
  int bad = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string file =
        r == 0 ? std::string(path) : std::string(path) + ".rank" + std::to_string(r);
    std::ifstream in(file);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", file.c_str());
      return 2;
    }
    const nlohmann::json j = nlohmann::json::parse(in);
    if (!j.contains("pipeline")) {
      std::fprintf(stderr, "%s has no pipeline section\n", file.c_str());
      return 2;
    }
    const nlohmann::json& p = j.at("pipeline");
    const auto stage = p.at("stage").get<size_t>(), stages = p.at("stages").get<size_t>();
    const auto m = p.at("micro_batches").get<size_t>();
    const std::string schedule = p.at("schedule").get<std::string>();
    const auto measured = j.at("tiers").at("device").at("activation").at("peak").get<double>();
    const auto scratch = p.at("scratch_activation_bytes").get<double>();
    const auto in_flight = p.at("in_flight").get<size_t>();
    bool ok = true;
    if (schedule == "interleaved") {
      // Each chunk holds its own micro-batches (a chunk's forwards and backwards are each in
      // micro-batch order) and the chunks share one scratch; what they add up to is checked
      // against the tracker, and the schedule's bound on all chunks at once (Megatron's warm-up
      // + 1) is printed beside it.
      const auto v = p.at("virtual_stages").get<size_t>();
      double expected = scratch;
      size_t total = 0;
      for (const nlohmann::json& c : p.at("chunks")) {
        const auto n = c.at("in_flight").get<size_t>();
        ok = ok && n >= 1 && n <= m;
        total += n;
        expected += static_cast<double>(n) * c.at("micro_batch_activation_bytes").get<double>();
      }
      const size_t bound = std::min((stages - stage - 1) * 2 + (v - 1) * stages + 1, m * v);
      ok = ok && total == in_flight && measured == expected;
      std::printf(
          "rank %d, stage %zu of %zu (interleaved, %zu chunks, m %zu): %zu micro-batch "
          "activations held over the chunks (the schedule has at most %zu in flight at once); "
          "activation peak measured %.0f, expected %.0f %s\n",
          r, stage, stages, v, m, total, bound, measured, expected, ok ? "ok" : "MISMATCH");
    } else {
      const size_t bound = schedule == "gpipe" ? m : std::min(stages - stage, m);
      const auto per_mb = p.at("micro_batch_activation_bytes").get<double>();
      const double expected = scratch + static_cast<double>(bound) * per_mb;
      ok = in_flight == bound && measured == expected && per_mb > 0.0;
      std::printf(
          "rank %d, stage %zu of %zu (%s, m %zu, blocks %zu): %zu micro-batches in flight "
          "(bound %zu); activation peak measured %.0f, scratch %.0f + %zu x %.0f = %.0f %s\n",
          r, stage, stages, schedule.c_str(), m, p.at("blocks").get<size_t>(), in_flight, bound,
          measured, scratch, bound, per_mb, expected, ok ? "ok" : "MISMATCH");
    }
    if (!ok) bad = 1;
  }
  return bad;
}

std::string rank_file(const char* path, int r) {
  return r == 0 ? std::string(path) : std::string(path) + ".rank" + std::to_string(r);
}

// Every rank's profile of a pipeline-parallel run shows its stage's timeline: in every step, one
// compute activity per forward and per backward of its micro-batches (2 m), a wait on the stall
// track per receive (first stage m, last m, middle 2 m: at least that many, a stage-3 gather may
// wait too), and the stage named in the run info.
int pipeline_profile(const char* memory_path, const char* profile_path, int ranks) {
  int bad = 0;
  for (int r = 0; r < ranks; ++r) {
    std::ifstream mem_in(rank_file(memory_path, r)), prof_in(rank_file(profile_path, r));
    if (!mem_in || !prof_in) {
      std::fprintf(stderr, "cannot read rank %d's memory report or profile\n", r);
      return 2;
    }
    const nlohmann::json mem = nlohmann::json::parse(mem_in);
    const nlohmann::json prof = nlohmann::json::parse(prof_in);
    const nlohmann::json& p = mem.at("pipeline");
    const auto stage = p.at("stage").get<size_t>(), stages = p.at("stages").get<size_t>();
    const auto m = p.at("micro_batches").get<size_t>();
    const size_t v = p.value("virtual_stages", size_t{1});
    // Every chunk but the first virtual stage receives its input, every one but the last its
    // output's gradient.
    const size_t receives =
        (v * stages > 1 ? 2 * m * v : 0) - (stage == 0 ? m : 0) - (stage + 1 == stages ? m : 0);
    const std::string named = prof.at("run").at("extra").at("pipeline_stage").get<std::string>();
    // Chunk 0 runs virtual stage `stage` of stages x v.
    const std::string expected_name =
        "stage " + std::to_string(stage) + " of " + std::to_string(stages * v) + ":";
    const bool named_ok = named.rfind(expected_name, 0) == 0;
    size_t step_bad = 0;
    size_t steps = 0;
    for (const nlohmann::json& st : prof.at("steps")) {
      const nlohmann::json& tracks = st.at("tracks");  // [seconds, bytes, count] per track
      const auto compute = tracks.at(0).at(2).get<size_t>();
      const auto stalls = tracks.at(7).at(2).get<size_t>();
      if (compute != 2 * m * v || stalls < receives) ++step_bad;
      ++steps;
    }
    std::printf(
        "rank %d (%s): %zu steps, %zu of them without %zu compute activities and at least %zu "
        "receive waits\n",
        r, named.c_str(), steps, step_bad, 2 * m * v, receives);
    if (step_bad != 0 || steps == 0 || !named_ok) bad = 1;
    // With its activities kept: every transfer is on the network link with one stream's bytes;
    // a training step sends as many as it receives (evaluations add some).
    if (!prof.contains("timeline")) continue;
    size_t sends = 0, recvs = 0, odd_bytes = 0;
    double bytes = -1;
    for (const nlohmann::json& a : prof.at("timeline").at("activities")) {
      const auto name = a.at(3).get<std::string>();
      if (name != "pipeline send" && name != "pipeline receive") continue;
      (name == "pipeline send" ? sends : recvs) += 1;
      if (a.at(2).get<int>() != 1) ++odd_bytes;  // the collective track
      const auto b = a.at(5).get<double>();
      if (bytes < 0) bytes = b;
      if (b != bytes || b <= 0) ++odd_bytes;
    }
    std::printf(
        "rank %d: %zu pipeline sends, %zu receives on the network link, %.0f bytes each "
        "(at least %zu of each over %zu steps)%s\n",
        r, sends, recvs, bytes, steps * receives, steps, odd_bytes ? ", some odd" : "");
    if (sends < steps * receives || recvs < steps * receives || odd_bytes) bad = 1;
  }
  return bad;
}

nlohmann::json read_json(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  return nlohmann::json::parse(in);
}

double activation_peak(const nlohmann::json& j) {
  return j.at("tiers").at("device").at("activation").at("peak").get<double>();
}

int ulysses_activations(const char* ref_path, const char* path, int ranks, double max_ratio) {
  const double ref = activation_peak(read_json(ref_path));
  int bad = 0;
  for (int r = 0; r < ranks; ++r) {
    const nlohmann::json j =
        read_json(r == 0 ? std::string(path) : std::string(path) + ".rank" + std::to_string(r));
    const nlohmann::json& u = j.at("ulysses");
    const double measured = activation_peak(j);
    const auto expected = u.at("activation_bytes").get<double>();
    const auto one_rank = u.at("one_rank_activation_bytes").get<double>();
    const auto ulysses = u.at("ulysses").get<double>();
    // The reference ran this micro-batch on one rank when its peak is the one-rank count.
    const bool measured_base = ref == one_rank;
    const double ratio = measured / (measured_base ? ref : one_rank);
    const bool ok = measured == expected && ratio <= max_ratio;
    std::printf(
        "rank %d: ulysses %.0f, %s positions of %s, activation peak measured %.0f, expected %.0f; "
        "one rank %.0f (%s): ratio %.4f, 1/ulysses %.4f, at most %.4f %s\n",
        r, ulysses, u.at("positions").dump().c_str(), u.at("seq_len").dump().c_str(), measured,
        expected, measured_base ? ref : one_rank,
        measured_base ? "measured by the reference run" : "the model's count", ratio, 1.0 / ulysses,
        max_ratio, ok ? "OK" : "FAIL");
    if (!ok) bad = 1;
  }
  return bad;
}

int collective_bytes(const char* metrics_path, const char* profile_path) {
  std::ifstream metrics(metrics_path);
  if (!metrics) throw std::runtime_error(std::string("cannot read ") + metrics_path);
  double tp_counted = 0, ulysses_counted = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    for (const char* k : {"tp_all_reduce_bytes", "tp_all_gather_bytes", "tp_reduce_scatter_bytes"})
      tp_counted += j.value(k, 0.0);
    ulysses_counted += j.value("ulysses_all_to_all_bytes", 0.0);
  }
  const nlohmann::json prof = read_json(profile_path);
  const nlohmann::json& timeline = prof.at("timeline");
  double tp_recorded = 0, ulysses_recorded = 0;
  size_t tp_records = 0, ulysses_records = 0;
  for (const nlohmann::json& a :
       timeline.at("activities")) {  // [start, end, track, name, unit, bytes]
    const auto name = a.at(3).get<std::string>();
    const auto bytes = a.at(5).get<double>();
    if (name.rfind("tp ", 0) == 0) tp_recorded += bytes, ++tp_records;
    if (name == "ulysses all_to_all") ulysses_recorded += bytes, ++ulysses_records;
  }
  const auto dropped = timeline.value("activities_dropped", 0.0);
  const bool ok = tp_recorded == tp_counted && ulysses_recorded == ulysses_counted && dropped == 0;
  std::printf(
      "rank 0's profile: tensor-parallel collectives %zu records, %.0f bytes (the metrics: %.0f); "
      "Ulysses all-to-alls %zu records, %.0f bytes (the metrics: %.0f); %.0f dropped: %s\n",
      tp_records, tp_recorded, tp_counted, ulysses_records, ulysses_recorded, ulysses_counted,
      dropped, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  if (what == "checkpoints" && argc == 6)
    return compare_checkpoints(argv[2], argv[3], std::stod(argv[4]), std::stod(argv[5]));
  if (what == "param-ratio" && argc == 5) return param_ratio(argv[2], argv[3], std::stod(argv[4]));
  if (what == "pipeline-activations" && argc == 4)
    return pipeline_activations(argv[2], std::stoi(argv[3]));
  if (what == "pipeline-profile" && argc == 5)
    return pipeline_profile(argv[2], argv[3], std::stoi(argv[4]));
  if (what == "collective-bytes" && argc == 4) try {
      return collective_bytes(argv[2], argv[3]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "collective-bytes: %s\n", e.what());
      return 2;
    }
  if (what == "ulysses-activations" && argc == 6) try {
      return ulysses_activations(argv[2], argv[3], std::stoi(argv[4]), std::stod(argv[5]));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ulysses-activations: %s\n", e.what());
      return 2;
    }
  std::fprintf(stderr,
               "usage: tp_match_check checkpoints <ref> <candidate> <atol> <rtol>\n"
               "       tp_match_check param-ratio <ref.json> <candidate.json> <max ratio>\n"
               "       tp_match_check pipeline-activations <memory.json> <ranks>\n"
               "       tp_match_check pipeline-profile <memory.json> <profile.json> <ranks>\n"
               "       tp_match_check collective-bytes <metrics.jsonl> <profile.json>\n"
               "       tp_match_check ulysses-activations <ref.json> <memory.json> <ranks> "
               "<max ratio>\n");
  return 2;
}
