// `tierzero bench ...`: the subcommands and their options; the benchmarks themselves are the
// bench library (src/bench), each a function from its options to its result lines.
#include <memory>

#include "bench_commands.hpp"
#include "commands.hpp"
#include "tierzero/bench/adam.hpp"
#include "tierzero/bench/comm.hpp"
#include "tierzero/bench/crc.hpp"
#include "tierzero/bench/io.hpp"
#include "tierzero/bench/offload.hpp"
#include "tierzero/bench/oversize.hpp"
#include "tierzero/bench/tokenize.hpp"
#include "tierzero/bench/train_step.hpp"

namespace tierzero::cli {

namespace {

void add_bench_train_options(CLI::App& t, bench::BenchTrainStepOptions& o) {
  t.add_option("--device", o.device, "cpu, cuda or cuda:N")->capture_default_str();
  t.add_option("--threads", o.threads, "CPU threads")->capture_default_str();
  t.add_option("--batch", o.batch,
               "micro-batch size; 0: the largest whose step fits --device-mem (on a GPU by "
               "default its memory, less what the CUDA context and libraries hold and a margin)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  t.add_option("--device-mem", o.device_mem,
               "bytes the step may hold on the device, e.g. 20GiB (0: the device's memory)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  t.add_option("--seq", o.seq, "sequence length")->capture_default_str();
  t.add_option("--steps", o.steps, "timed steps")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  t.add_option("--model", o.model,
               "gpt2, gpt2-medium, gpt2-large, gpt2-xl, llama-3.2-1b, llama-3.1-8b, "
               "qwen2.5-0.5b, smollm-135m, llama-tiny")
      ->capture_default_str();
  t.add_option("--matmul-precision", o.matmul_precision,
               "how the products run (Kernels::set_matmul_precision): fp32, or on CUDA's tensor "
               "cores tf32, bf16 or fp16 (fp32 in memory either way; the CPU stays fp32)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}))
      ->capture_default_str();
  t.add_flag_callback(
      "--tf32", [&o] { o.matmul_precision = "tf32"; }, "the same as --matmul-precision tf32");
  t.add_option("--compute-dtype", o.compute_dtype,
               "what the step's products and activations run in: auto (16-bit with a bf16 or "
               "fp16 precision on CUDA), fp32, or the precision's 16-bit type")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  t.add_option("--classifier-chunk", o.classifier_chunk,
               "tokens of logits the classifier holds at once (model.classifier_chunk_tokens); "
               "0: automatic, 128 MiB of fp32 logits; batch x seq or more: whole")
      ->check(whole_in(0, int64_t{1} << 40))
      ->capture_default_str();
}

void add_bench_io_options(CLI::App& o, bench::BenchIoOptions& io) {
  o.add_option("--dir", io.dir, "directory on the drive to measure (default: under /var/tmp)");
  o.add_option("--size", io.size, "bytes of swap, e.g. 2G")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  o.add_option("--block", io.block, "request size, e.g. 1M")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  o.add_option("--queue-depth", io.queue_depth, "requests in flight")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  o.add_option("--repeats", io.repeats, "each figure is the median of this many runs")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
}

void add_bench_adam_options(CLI::App& command, bench::BenchAdamOptions& o) {
  command.add_option("--params", o.params, "parameters updated per step")
      ->check(CLI::Range(size_t{1}, size_t{1} << 34))
      ->capture_default_str();
  command.add_option("--threads", o.threads, "OpenMP threads (AdamW and triad)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  command.add_option("--repeats", o.repeats, "timed steps and triads; figures are medians")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command
      .add_option("--peer", o.peer,
                  "PyTorch's fused CPU AdamW beside ours: auto (when python imports torch), "
                  "torch (required), none")
      ->check(CLI::IsMember({"auto", "torch", "none"}))
      ->capture_default_str();
  command.add_option("--python", o.python, "the Python that runs the peer")->capture_default_str();
}

void add_bench_comm_options(CLI::App& command, bench::BenchCommOptions& o) {
  command.add_option("--ranks", o.ranks, "ranks to launch with mpiexec (when not under one)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  command.add_option("--min-bytes", o.min_bytes, "smallest message in bytes")
      ->capture_default_str();
  command.add_option("--max-bytes", o.max_bytes, "largest message in bytes (x4 steps)")
      ->capture_default_str();
  command.add_option("--iters", o.iters, "timed iterations per size")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  command.add_option("--ops", o.ops, "all, or a comma list of operations")->capture_default_str();
  command.add_option("--dtype", o.dtype, "fp32, bf16 or fp16")->capture_default_str();
}

std::function<int()> add_bench_crc_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchCrcOptions>();
  CLI::App* c = parent.add_subcommand("crc", "CRC32C: TierZero's kernel vs. ISA-L's crc32_iscsi");
  add_ranged_option(*c, "--mib", o->mib, "buffer size in MiB", 1, 1 << 16);
  add_ranged_option(*c, "--repeats", o->repeats, "runs of each kernel, alternating", 1, 1000);
  return [o, c] { return c->parsed() ? bench::bench_crc(*o).report.exit_code() : -1; };
}

std::function<int()> add_bench_oversize_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchOversizeOptions>();
  CLI::App* c = parent.add_subcommand(
      "oversize", "`tierzero train` of a model larger than RAM, all state on NVMe, vs. its floor");
  c->add_option("--model", o->model, "gpt2 ... gpt2-xl, or layers,heads,channels")
      ->capture_default_str();
  add_ranged_option(*c, "--seq", o->seq, "tokens per sequence", 1, 1 << 20);
  add_ranged_option(*c, "--batch", o->batch, "micro-batch", 1, 1 << 20);
  add_ranged_option(*c, "--steps", o->steps, "steps of the long run (the short run: one fewer)", 2,
                    1000);
  c->add_option("--host-mem", o->host_mem, "pinned host budget, e.g. 6GiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--device-mem", o->device_mem, "device budget, e.g. 2GiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--grads", o->grads, "where gradient shards live: cpu or nvme")
      ->check(CLI::IsMember({"cpu", "nvme"}))
      ->capture_default_str();
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads of the run", 1, 4096);
  c->add_option("--dir", o->dir, "NVMe directory (default /var/tmp or .)");
  c->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  add_ranged_option(*c, "--timeout", o->timeout_s, "seconds per child run", 1, 86400);
  return [o, c] { return c->parsed() ? bench::bench_oversize(*o).exit_code() : -1; };
}

std::function<int()> add_bench_offload_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchOffloadOptions>();
  CLI::App* c = parent.add_subcommand(
      "offload",
      "`tierzero train` with offloaded states vs. its engines' floor (GEMM, copies, "
      "CPU AdamW, NVMe) measured in the same run");
  c->add_option("--mode", o->mode, "host (ZeRO-Offload) or nvme (ZeRO-Infinity)")
      ->check(CLI::IsMember({"host", "nvme"}))
      ->capture_default_str();
  c->add_option("--model", o->model, "gpt2 ... gpt2-xl, or layers,heads,channels")
      ->capture_default_str();
  add_ranged_option(*c, "--seq", o->seq, "tokens per sequence", 1, 1 << 20);
  add_ranged_option(*c, "--batch", o->batch, "micro-batch", 1, 1 << 20);
  add_ranged_option(*c, "--steps", o->steps, "steps run (the first is not measured)", 2, 1000);
  c->add_option("--host-mem", o->host_mem, "pinned host budget, e.g. 8GiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  c->add_option("--device-mem", o->device_mem, "device budget, e.g. 2GiB")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  add_ranged_option(*c, "--threads", o->threads, "OpenMP threads", 1, 4096);
  c->add_option("--dir", o->dir, "directory for the NVMe swap, fio's file and the logs")
      ->capture_default_str();
  c->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  c->add_option("--optimizer-overlap", o->overlap, "tierzero.optimizer_overlap of the run")
      ->check(CLI::IsMember({"off", "plain", "speculative"}))
      ->capture_default_str();
  return [o, c] { return c->parsed() ? bench::bench_offload(*o).exit_code() : -1; };
}

std::function<int()> add_bench_tokenize_command(CLI::App& parent) {
  auto o = std::make_shared<bench::BenchTokenizeOptions>();
  CLI::App* c = parent.add_subcommand(
      "tokenize", "byte-level BPE (tokenizer.json) encoding MB/s over a corpus, one thread");
  c->add_option("--tokenizer", o->tokenizer, "Hugging Face tokenizer.json")->required();
  c->add_option("--input", o->input, "UTF-8 text corpus")->required();
  add_ranged_option(*c, "--repeats", o->repeats, "runs (the best one is the figure)", 1, 100);
  return [o, c] { return c->parsed() ? bench::bench_tokenize(*o).report.exit_code() : -1; };
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  CLI::App* group = app.add_subcommand("bench", "measure against the machine's own ceilings");
  group->require_subcommand(1);

  auto train = std::make_shared<bench::BenchTrainStepOptions>();
  CLI::App* t = group->add_subcommand(
      "train", "a GPT training step (GPT-2 or Llama family) vs. this machine's sgemm");
  add_bench_train_options(*t, *train);

  auto io = std::make_shared<bench::BenchIoOptions>();
  CLI::App* o =
      group->add_subcommand("io", "NVMe swap write/read/stream vs. fio on the same drive");
  add_bench_io_options(*o, *io);

  auto comm = std::make_shared<bench::BenchCommOptions>();
  CLI::App* c =
      group->add_subcommand("comm", "collectives (MPI backend) vs. raw MPI, 1 KiB-256 MiB");
  add_bench_comm_options(*c, *comm);

  auto adam = std::make_shared<bench::BenchAdamOptions>();
  CLI::App* a =
      group->add_subcommand("adam", "CPU AdamW vs. a STREAM triad and PyTorch's fused AdamW");
  add_bench_adam_options(*a, *adam);

  std::function<int()> train_modes = add_bench_train_modes_commands(*group);
  std::function<int()> tp = add_bench_tp_command(*group);
  std::function<int()> pp = add_bench_pp_command(*group);
  std::function<int()> ulysses = add_bench_ulysses_command(*group);
  std::function<int()> crc = add_bench_crc_command(*group);
  std::function<int()> oversize = add_bench_oversize_command(*group);
  std::function<int()> offload = add_bench_offload_command(*group);
  std::function<int()> tokenize = add_bench_tokenize_command(*group);
  std::function<int()> activations = add_bench_activations_command(*group);

  return {group, [train, io, comm, adam, t, o, c, a, train_modes, tp, pp, ulysses, crc, oversize,
                  offload, tokenize, activations] {
            if (const int rc = activations(); rc >= 0) return rc;
            if (const int rc = train_modes(); rc >= 0) return rc;
            if (const int rc = crc(); rc >= 0) return rc;
            if (const int rc = tp(); rc >= 0) return rc;
            if (const int rc = pp(); rc >= 0) return rc;
            if (const int rc = ulysses(); rc >= 0) return rc;
            if (const int rc = oversize(); rc >= 0) return rc;
            if (const int rc = offload(); rc >= 0) return rc;
            if (const int rc = tokenize(); rc >= 0) return rc;
            if (t->parsed()) return bench::bench_train_step(*train).report.exit_code();
            if (o->parsed()) return bench::bench_io(*io).report.exit_code();
            if (c->parsed()) return bench::bench_comm(*comm).exit_code();
            if (a->parsed()) return bench::bench_adam(*adam).report.exit_code();
            return 2;
          }};
}

}  // namespace tierzero::cli
