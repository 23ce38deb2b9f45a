// Must not compile: CPU MirroredStrategy replicas are threads that communicate through InProcess.
#include <strata/strata.hpp>
struct NotInProcess {};
int main() {
  strata::MirroredStrategy<NotInProcess> s(2);
  return s.num_replicas_in_sync();
}
