// Must not compile, with one error: strategy.reduce() of a replica's own loss inside the
// replica function, its result used as a number (`.item()`); the static_assert is all the
// compiler says, not the first of a cascade.
#include <strata/strata.hpp>
int main() {
  strata::MirroredStrategy<> s(2);
  s.run([&](strata::ReplicaContext&) {
    strata::Tensor loss = strata::zeros({1});
    const double total = s.reduce(strata::ReduceOp::Sum, loss).item();
    strata::Tensor all = s.gather(loss);
    return total + all.item();
  });
  return 0;
}
