// TorchAdamWPeer (adam_torch_peer.hpp): the Python side is a short script passed with -c; it
// answers "ready <version>", then one line per command (step: the step's seconds, timed in the
// peer around opt.step() alone; check: ok or failed).
#include "adam_torch_peer.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"

namespace tierzero::bench {

namespace {

// argv: n threads lr beta1 beta2 eps weight_decay. The gradient stays fixed, as ours does.
constexpr const char* kScript = R"PY(
import sys, time
n, threads = int(sys.argv[1]), int(sys.argv[2])
lr, b1, b2, eps, wd = (float(a) for a in sys.argv[3:8])
try:
    import torch
except Exception as e:
    print("unavailable cannot import torch: %s" % e, flush=True)
    sys.exit(0)
torch.set_num_threads(threads)
gen = torch.Generator().manual_seed(7)
p = torch.nn.Parameter(torch.empty(n).uniform_(-1.0, 1.0, generator=gen))
p.grad = torch.empty(n).uniform_(-1e-2, 1e-2, generator=gen)
try:
    opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, fused=True)
    opt.step()  # creates the moments: the warm-up
except Exception as e:
    print("unavailable fused CPU AdamW failed: %s" % e, flush=True)
    sys.exit(0)
stride = max(1, n // 4099)
before = p.detach()[::stride].clone()
print("ready torch %s" % torch.__version__, flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "step":
        t = time.perf_counter()
        opt.step()
        print("%.9f" % (time.perf_counter() - t), flush=True)
    elif cmd == "check":
        q = p.detach()
        ok = bool(torch.isfinite(q).all()) and bool((q[::stride] != before).all())
        print("ok" if ok else "failed", flush=True)
    else:
        print("unknown command " + cmd, flush=True)
)PY";

std::string number(double x) {
  char s[64];
  std::snprintf(s, sizeof s, "%.9g", x);
  return s;
}

}  // namespace

TorchAdamWPeer::TorchAdamWPeer(const std::string& python, size_t n, int threads,
                               const kernels::AdamWParams& p, const std::string& log) {
  const std::vector<std::string> argv = {python,
                                         "-c",
                                         kScript,
                                         std::to_string(n),
                                         std::to_string(threads),
                                         number(p.lr),
                                         number(p.beta1),
                                         number(p.beta2),
                                         number(p.eps),
                                         number(p.weight_decay)};
  const std::vector<std::string> env = {"OMP_NUM_THREADS=" + std::to_string(threads)};
  try {
    auto process = std::make_unique<PeerProcess>("torch AdamW", argv, env, log);
    const std::string hello = process->read_line(600.0);
    if (hello.rfind("ready ", 0) != 0) {
      why_not_ = hello.rfind("unavailable ", 0) == 0 ? hello.substr(12) : "said '" + hello + "'";
      return;
    }
    version_ = hello.substr(6);
    process_ = std::move(process);
  } catch (const Error& e) {
    why_not_ = e.what();
  }
}

double TorchAdamWPeer::step_seconds() {
  TZ_CHECK(available(), "torch AdamW peer: not running (" + why_not_ + ")", "");
  const std::string reply = process_->request("step", 600.0);
  try {
    size_t used = 0;
    const double s = std::stod(reply, &used);
    if (used == reply.size() && s >= 0.0) return s;
  } catch (const std::exception&) {
  }
  TZ_THROW("torch AdamW peer: step answered '" + reply + "', not a time", "");
}

bool TorchAdamWPeer::check() {
  TZ_CHECK(available(), "torch AdamW peer: not running (" + why_not_ + ")", "");
  return process_->request("check", 600.0) == "ok";
}

}  // namespace tierzero::bench
