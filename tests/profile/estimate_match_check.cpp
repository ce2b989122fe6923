// Compares `tierzero estimate --json` with the memory JSON each rank of `tierzero train
// --memory-json` writes: model state (param, grad, optimizer) on every tier must equal the
// estimate exactly (bytes held at the end of the run), the activation peak must be within 10% of
// the estimate, and every category's peak must stay within its estimated bound (model state plus
// buffers, +10%): buffers are upper bounds, so they are not held to a lower limit.
// Prints every comparison. usage: estimate_match_check <estimate.json> <mem.json>...
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

nlohmann::json load(const char* path) {
  std::ifstream f(path);
  if (!f) {
    std::fprintf(stderr, "estimate_match_check: cannot read %s\n", path);
    std::exit(2);
  }
  return nlohmann::json::parse(f);
}

size_t get(const nlohmann::json& j, const char* tier, const char* cat) {
  if (!j.contains(tier) || !j[tier].contains(cat)) return 0;
  return j[tier][cat].get<size_t>();
}

size_t measured(const nlohmann::json& tiers, const char* tier, const char* cat, const char* what) {
  if (!tiers.contains(tier) || !tiers[tier].contains(cat)) return 0;
  return tiers[tier][cat][what].get<size_t>();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: estimate_match_check <estimate.json> <mem.json>...\n");
    return 2;
  }
  const nlohmann::json est = load(argv[1]);
  int failures = 0;
  const char* tiers[] = {"device", "host", "nvme"};
  for (int f = 2; f < argc; ++f) {
    const nlohmann::json mem = load(argv[f]);
    const nlohmann::json& m = mem["tiers"];
    std::printf("%s (rank %d of %d)\n", argv[f], mem.value("rank", 0), mem.value("ranks", 1));
    for (const char* t : tiers) {
      for (const char* c : {"param", "grad", "optimizer"}) {
        const size_t want = get(est["tiers"], t, c), got = measured(m, t, c, "current");
        const bool ok = want == got;
        failures += !ok;
        std::printf("  %-6s %-10s model state: estimate %12zu, measured %12zu  %s\n", t, c, want,
                    got, ok ? "ok" : "MISMATCH");
      }
      for (const char* c : {"param", "grad", "optimizer", "activation", "comm", "io"}) {
        const size_t bound = get(est["tiers"], t, c) + get(est["buffers"], t, c);
        const size_t peak = measured(m, t, c, "peak");
        if (bound == 0 && peak == 0) continue;
        const double ratio =
            bound > 0 ? static_cast<double>(peak) / static_cast<double>(bound) : 1e9;
        // Activations are counted exactly by the GPT, so both directions; other buffers are
        // bounds, so the measured peak must not exceed them.
        const bool exact = std::string(c) == "activation";
        const bool ok = ratio <= 1.10 && (!exact || ratio >= 0.90);
        failures += !ok;
        std::printf("  %-6s %-10s peak: estimate %12zu, measured %12zu (ratio %.3f)  %s\n", t, c,
                    bound, peak, ratio, ok ? "ok" : "OUT OF RANGE");
      }
    }
  }
  std::printf(failures ? "estimate_match_check: %d FAILED\n" : "estimate_match_check: OK\n",
              failures);
  return failures ? 1 : 0;
}
