// Formatting of step lines and the memory summary.
#include "tierzero/train/progress.hpp"

#include <string>

namespace tierzero::train {

void print_step_line(std::FILE* out, const StepRecord& r, int64_t total, const MemoryTracker& t) {
  if (!out) return;
  constexpr int kWidth = 20;
  const double frac = total > 0 ? static_cast<double>(r.step) / static_cast<double>(total) : 1.0;
  const int filled = static_cast<int>(frac * kWidth + 0.5);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  std::fprintf(out,
               "step %5lld/%lld [%s] %3d%% | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | "
               "%8.0f tok/s | device %s host %s nvme %s\n",
               static_cast<long long>(r.step), static_cast<long long>(total), bar.c_str(),
               static_cast<int>(frac * 100.0 + 0.5), r.loss, r.lr, r.grad_norm, r.seconds * 1000.0,
               r.tokens_per_second, format_bytes(t.current(Tier::device)).c_str(),
               format_bytes(t.current(Tier::host)).c_str(),
               format_bytes(t.current(Tier::nvme)).c_str());
  if (r.fetch_counted && r.nvme_reads + r.handoffs > 0)
    std::fprintf(out,
                 "           prefetch: %zu hits, %zu on demand, stall %.1f ms | nvme: %zu shards "
                 "read, %zu handed over by the optimizer\n",
                 r.prefetch_hits, r.on_demand_fetches, r.stall_s * 1000.0, r.nvme_reads,
                 r.handoffs);
  else if (r.fetch_counted)
    std::fprintf(out, "           prefetch: %zu hits, %zu on demand, stall %.1f ms\n",
                 r.prefetch_hits, r.on_demand_fetches, r.stall_s * 1000.0);
  std::fflush(out);
}

void print_memory_summary(std::FILE* out, const MemoryTracker& t) {
  if (!out) return;
  std::fprintf(out, "memory summary (current / peak):\n");
  std::fprintf(out, "  %-8s", "tier");
  for (size_t c = 0; c < kNumCategories; ++c)
    std::fprintf(out, " %21s", category_name(static_cast<Category>(c)));
  std::fprintf(out, " %21s\n", "total");
  for (size_t ti = 0; ti < kNumTiers; ++ti) {
    auto tier = static_cast<Tier>(ti);
    std::fprintf(out, "  %-8s", tier_name(tier));
    for (size_t c = 0; c < kNumCategories; ++c) {
      auto cat = static_cast<Category>(c);
      std::string cell =
          format_bytes(t.current(tier, cat)) + " / " + format_bytes(t.peak(tier, cat));
      std::fprintf(out, " %21s", cell.c_str());
    }
    std::string total = format_bytes(t.current(tier)) + " / " + format_bytes(t.peak(tier));
    std::fprintf(out, " %21s\n", total.c_str());
  }
  std::fflush(out);
}

}  // namespace tierzero::train
