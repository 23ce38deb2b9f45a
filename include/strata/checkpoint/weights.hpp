/// \file
/// Weights for inference: a model's parameters and buffers alone (BatchNorm's running
/// statistics), in the checkpoint file format (one tensor each, named as named_parameters()
/// and named_buffers() name them), separate from training checkpoints (no optimizer state, no
/// position, no generators). Loading checks every name, shape, dtype and checksum before
/// changing anything, and names the first mismatch or damaged tensor.
///
/// @code
/// if (strategy.is_chief()) strata::save_weights(model, "model.weights");   // any strategy
/// strata::nn::Sequential fresh = make_model();
/// strata::load_weights(fresh, "model.weights");                           // then model(x)
/// @endcode
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/autograd/grad_mode.hpp>
#include <strata/checkpoint/file.hpp>
#include <strata/nn/module.hpp>

namespace strata {

namespace detail {
/// The module whose parameters a save reads: a Module itself, or the running replica's copy of
/// a Replicated<T> (what scope() returns under MirroredStrategy and CentralStorageStrategy),
/// whose copies hold the same values.
template <class M>
const nn::Module& weights_source(const M& model) {
  if constexpr (std::is_base_of_v<nn::Module, M>) return model;
  else return model.local();
}
/// What a weights file holds of a module: its parameters, then its buffers.
inline std::vector<std::pair<std::string, Tensor>> weights_of(const nn::Module& m) {
  auto out = m.named_parameters();
  for (auto& named : m.named_buffers()) out.push_back(std::move(named));
  return out;
}
}  // namespace detail

/// Writes `model`'s parameters and buffers to `path` (atomically: a crash leaves the old file or none).
template <class M>
void save_weights(const M& model, const std::filesystem::path& path) {
  checkpoint::NamedTensors tensors;
  for (auto& [name, t] : detail::weights_of(detail::weights_source(model)))
    tensors.emplace_back(name, t.to(Device::cpu()).contiguous());
  checkpoint::write_checkpoint(path, tensors);
}

namespace detail {
/// Checks `m`'s parameters and buffers against the file `reader` reads: the file holds each,
/// of its shape and dtype, and nothing else; the first mismatch is an error naming it.
inline void check_weights(const checkpoint::Reader& reader, const nn::Module& m) {
  std::set<std::string> expected;
  for (const auto& [name, t] : weights_of(m)) {
    expected.insert(name);
    const checkpoint::Entry* e = reader.find(name);
    STRATA_REQUIRE(e != nullptr, invalid_argument, "strata.weights", "load_weights '", reader.name(), "': no tensor '",
                   name, "' for the model's tensor of shape ", t.shape());
    STRATA_REQUIRE(e->shape == t.shape() && e->dtype == t.dtype(), invalid_argument, "strata.weights",
                   "load_weights '", reader.name(), "': '", name, "' is ", e->shape, " ", name_of(e->dtype),
                   " in the file, ", t.shape(), " ", name_of(t.dtype()), " in the model");
  }
  for (const checkpoint::Entry& e : reader.entries())
    STRATA_REQUIRE(expected.count(e.name) == 1, invalid_argument, "strata.weights", "load_weights '", reader.name(),
                   "': the file's '", e.name, "' is no parameter or buffer of the model");
}
}  // namespace detail

/// Sets `model`'s parameters and buffers (on whatever device they are) to the values saved in
/// `path`. The file must hold exactly the model's parameters and buffers, with their shapes
/// and dtypes, and every tensor must pass its checksum: all of it is checked before any value
/// changes, so a mismatch or a damaged file is an error naming it, and the model is left as
/// it was. (The values are then read again from the file the check read, held open: a file
/// replaced meanwhile, as write_checkpoint replaces one, is not the one read.)
template <class M>
void load_weights(M& model, const std::filesystem::path& path) {
  const checkpoint::Reader reader(path);
  std::vector<nn::Module*> copies;  // every copy of a Replicated<T>, or the module
  if constexpr (requires { model.num_replicas(); model.replica(0); }) {
    for (std::size_t r = 0; r < model.num_replicas(); ++r) copies.push_back(&model.replica(r));
  } else {
    copies.push_back(&model);
  }
  for (const nn::Module* m : copies) detail::check_weights(reader, *m);
  reader.verify();  // every checksum, streamed through in pieces: no copy of the model is held
  for (nn::Module* m : copies)
    for (const auto& [name, t] : detail::weights_of(*m)) checkpoint::read_into_tensor(reader, name, t);
}

}  // namespace strata
