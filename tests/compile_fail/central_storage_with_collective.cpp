// Must not compile: CentralStorageStrategy keeps its replicas in one process; it takes no collective.
#include <strata/strata.hpp>
int main() {
  strata::CentralStorageStrategy<strata::collective::InProcess> s(2);
  return s.num_replicas_in_sync();
}
