// TorchAdamWPeer: PyTorch's fused CPU AdamW (torch.optim.AdamW(fused=True), the fastest CPU
// AdamW among the peers) over the same number of fp32 parameters with the same hyper-parameters
// and threads, run in a Python child beside `tierzero bench adam` so that its steps interleave
// with ours. It moves what our fp32 update moves: reads param, grad, m, v and writes param, m, v,
// 28 bytes per parameter. PyTorch is a peer here, never a dependency: where python or torch is
// missing the peer says why and the benchmark goes on without it. Internal to bench.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "peer_process.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::bench {

class TorchAdamWPeer {
 public:
  // Starts `python` with the peer's script and waits (up to 10 minutes: it fills n parameters)
  // until it is ready. Never throws for a missing python, torch or fused CPU AdamW, nor for a
  // peer that dies while setting up: available() is then false and why_not() says why.
  TorchAdamWPeer(const std::string& python, size_t n, int threads, const kernels::AdamWParams& p,
                 const std::string& log);
  bool available() const { return process_ != nullptr; }
  const std::string& why_not() const { return why_not_; }
  const std::string& version() const { return version_; }  // e.g. "torch 2.15.0"

  double step_seconds();  // one timed step in the peer; throws Error when it fails
  // The peer's own check after its steps: every parameter finite, and sampled ones changed.
  bool check();

 private:
  std::unique_ptr<PeerProcess> process_;
  std::string why_not_;
  std::string version_;
};

}  // namespace tierzero::bench
