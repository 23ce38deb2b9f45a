// Writes a few valid checkpoint files as the fuzzer's seed corpus: make_seed DIR
#include <cstdint>
#include <string>

#include <strata/checkpoint/file.hpp>
#include <strata/strata.hpp>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string dir = argv[1];
  strata::Generator g(1);
  strata::checkpoint::write_checkpoint(dir + "/empty.strata", {});
  strata::checkpoint::write_checkpoint(dir + "/one.strata", {{"w", strata::uniform({2, 3}, -1, 1, g)}});
  strata::checkpoint::write_checkpoint(
      dir + "/mixed.strata", {{"model.weight", strata::uniform({4, 4}, -1, 1, g)},
                              {"step", strata::full({}, 7, strata::DType::i64)},
                              {"rng", strata::from_vector<std::int32_t>({2}, {1, 2})},
                              {"none", strata::Tensor::empty({0})}});
  return 0;
}
