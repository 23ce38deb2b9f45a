// Must not compile: grad() of a temporary parameter list. Gradients views the caller's list,
// which would be gone before the view is read.
#include <strata/strata.hpp>
int main() {
  strata::Tensor x = strata::ones({2}).requires_grad_(true);
  strata::Tensor loss = strata::sum(x * x);
  auto g = strata::grad(loss, std::vector<strata::Tensor>{x});
  return static_cast<int>(g.size());
}
