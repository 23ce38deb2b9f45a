// Must not compile, with one error: reduce() and gather() of a PerReplica whose values are
// neither tensors nor numbers (here a bool flag and a string).
#include <string>
#include <strata/strata.hpp>
int main() {
  strata::OneDeviceStrategy s;
  auto flags = s.run([](strata::ReplicaContext&) { return true; });
  const bool any = s.reduce(strata::ReduceOp::Max, flags);
  auto names = s.run([](strata::ReplicaContext&) { return std::string("replica"); });
  strata::Tensor all = s.gather(names);
  return any && all.defined();
}
