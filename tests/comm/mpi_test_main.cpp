// main() for the multi-rank GoogleTest programs: starts MPI (via MpiSession) before the tests
// and keeps ranks other than 0 quiet except for failures, so mpiexec's output stays readable.
#include <gtest/gtest.h>

#include <memory>

#include "mpi_test_main.hpp"

namespace tierzero::comm::test {
namespace {
MpiSession* g_session = nullptr;
}
MpiSession& session() {
  return *g_session;
}
}  // namespace tierzero::comm::test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  int code = 1;
  {
    tierzero::comm::MpiSession mpi(&argc, &argv);
    tierzero::comm::test::g_session = &mpi;
    if (mpi.rank() != 0) {
      // Brief mode: only failures, so eight ranks do not print eight copies of every line.
      ::testing::GTEST_FLAG(brief) = true;
    }
    code = RUN_ALL_TESTS();
    tierzero::comm::test::g_session = nullptr;
  }
  return code;
}
