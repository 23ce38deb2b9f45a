// Must not compile: MultiWorkerMirroredStrategy puts one replica per process; threads are MirroredStrategy's.
#include <strata/strata.hpp>
int main() {
  strata::MultiWorkerMirroredStrategy<strata::collective::InProcess> s;
  return s.num_replicas_in_sync();
}
