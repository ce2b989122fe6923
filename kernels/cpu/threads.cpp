// The OpenMP thread count the CPU kernels run with, per calling thread. A thread the caller
// starts begins with OpenMP's default (every core); a background thread running kernels next to
// the training thread (the NVMe optimizer) takes the training thread's count through these.
#include <omp.h>

#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

int threads() {
  return omp_get_max_threads();
}

void set_threads(int threads) {
  if (threads > 0) omp_set_num_threads(threads);
}

}  // namespace tierzero::kernels::cpu
