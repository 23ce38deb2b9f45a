// Must not compile: a parameter server's transport connects processes; InProcess ranks are threads.
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>
int main() {
  strata::ParameterServerStrategy<strata::collective::InProcess, strata::ps::Sync> s;
  (void)s;
  return 0;
}
