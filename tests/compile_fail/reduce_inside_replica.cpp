// Must not compile: strategy.reduce() of a replica's own loss, inside the replica function
// (the PerReplica value run() returns is what reduce takes; ctx.all_reduce reduces inside).
#include <strata/strata.hpp>
int main() {
  strata::MirroredStrategy<> s(2);
  s.run([&](strata::ReplicaContext&) {
    strata::Tensor loss = strata::zeros({1});
    s.reduce(strata::ReduceOp::Sum, loss);
  });
  return 0;
}
