// The conformance suite (conformance.hpp) on collective::Mpi, run under mpirun: groups of 1 to
// 4 ranks are split off MPI_COMM_WORLD. Every rank runs the tests; the exit status is the
// worst over all ranks.
#define DOCTEST_CONFIG_IMPLEMENT
#include "collective/conformance.hpp"

#include <strata/collective/mpi.hpp>

using strata::collective::Mpi;

// The capabilities Mpi opts into, and those it lacks (collective/capabilities.hpp).
static_assert(strata::Collective<Mpi> && strata::collective::RawCollective<Mpi> &&
              strata::collective::WireCompression<Mpi> && strata::collective::HostSharedMemory<Mpi>);
static_assert(!strata::collective::DeviceCollective<Mpi> && !strata::collective::ThreadGroupCollective<Mpi>);

template <>
struct World<Mpi> {
  template <class F>
  static void run(int n, F&& fn) {
    int world = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (n > world) return;  // mpirun gave fewer ranks than this case needs
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub != MPI_COMM_NULL) {
      {
        Mpi c(sub);
        fn(c);
      }
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
};

TEST_CASE_TEMPLATE_INVOKE(allreduce_suite, Mpi);
TEST_CASE_TEMPLATE_INVOKE(data_movement_suite, Mpi);
TEST_CASE_TEMPLATE_INVOKE(async_suite, Mpi);
TEST_CASE_TEMPLATE_INVOKE(async_gather_suite, Mpi);
TEST_CASE_TEMPLATE_INVOKE(shared_buffer_suite, Mpi);

TEST_CASE("Collective.Mpi.DebugModeNamesMismatchedCalls") {
  strata::collective::Options o;
  o.check_fingerprints = true;
  Mpi c(MPI_COMM_WORLD, o);
  if (c.size() < 2) return;
  std::vector<float> x(c.rank() == 0 ? 4 : 5, 1.0f);
  CHECK_THROWS_WITH_AS(c.allreduce(std::span(x), strata::ReduceOp::Sum), doctest::Contains("float32 x 4"),
                       strata::collective_error);
}

TEST_CASE("Collective.Mpi.MismatchMatrix") {
  strata::collective::Options o;
  o.check_fingerprints = true;
  for (int k = 0; k < conformance::kMismatchCases; ++k) {
    Mpi c(MPI_COMM_WORLD, o);
    if (c.size() >= 2) conformance::mismatch_case(c, k);
  }
}

int main(int argc, char** argv) {
  Mpi::initialize();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  ctx.setOption("no-colors", true);
  if (rank != 0) ctx.setOption("minimal", true);
  int result = ctx.run();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}
