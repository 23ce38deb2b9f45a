/// \file
/// WrapUnits: which modules of a model ShardedStrategy's stage 3 gathers as units, and which
/// unit each parameter belongs to. The user names the modules, or the size rule picks them:
/// walking down from the model, a module whose parameters take at most `unit_bytes` is a unit
/// when they take at least an eighth of it (smaller ones stay with the model's own
/// parameters, kept whole); a larger one is walked into. docs/sharding.md, "Stage 3".
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/nn/module.hpp>
#include <strata/support/check.hpp>
#include <strata/support/error.hpp>

namespace strata::detail {

struct WrapUnits {
  std::vector<int> of_param;  ///< per parameter (the model's parameters() order): its unit, or -1 (kept whole)
  std::vector<std::pair<std::string, nn::Module*>> modules;  ///< per unit: its name and module
};

inline std::size_t parameter_bytes(const nn::Module& m) {
  std::size_t bytes = 0;
  for (const Tensor& p : m.parameters()) bytes += p.nbytes();
  return bytes;
}

namespace wrap_units_detail {
inline void by_size(const std::string& prefix, nn::Module& m, std::size_t unit_bytes,
                    std::vector<std::pair<std::string, nn::Module*>>& out) {
  for (auto& [name, child] : m.named_children()) {
    const std::size_t bytes = parameter_bytes(*child);
    const std::string full = prefix.empty() ? name : prefix + "." + name;
    if (bytes > unit_bytes)
      by_size(full, *child, unit_bytes, out);
    else if (bytes > 0 && bytes >= unit_bytes / 8)
      out.emplace_back(full, child);
  }
}
}  // namespace wrap_units_detail

/// The units of `model`: the modules `names` names (named_modules()' names), or, where it is
/// empty, the size rule's. A name that is no module, or a unit inside another, is an error.
inline WrapUnits choose_wrap_units(nn::Module& model, std::span<const std::string> names, std::size_t unit_bytes) {
  WrapUnits u;
  if (names.empty()) {
    STRATA_REQUIRE(unit_bytes > 0, invalid_argument, "strata.strategy", "ShardOptions::unit_bytes must be positive");
    wrap_units_detail::by_size("", model, unit_bytes, u.modules);
  } else {
    const auto all = model.named_modules();
    for (const std::string& n : names) {
      nn::Module* found = nullptr;
      for (const auto& [name, m] : all)
        if (name == n) found = m;
      std::string known;
      for (std::size_t i = 0; i < all.size() && i < 12; ++i) known += (i ? ", " : "") + all[i].first;
      STRATA_REQUIRE(found != nullptr, invalid_argument, "strata.strategy", "ShardOptions::wrap_units: the model has no "
                     "module named '", n, "' (its modules: ", known, all.size() > 12 ? ", ..." : "", ")");
      for (const auto& [other, m] : u.modules)
        STRATA_REQUIRE(n.rfind(other + ".", 0) != 0 && other.rfind(n + ".", 0) != 0 && n != other, invalid_argument,
                       "strata.strategy", "ShardOptions::wrap_units: '", n, "' and '", other,
                       "' overlap; a wrap unit cannot hold another or be named twice");
      u.modules.emplace_back(n, found);
    }
  }
  const auto params = model.named_parameters();
  u.of_param.assign(params.size(), -1);
  for (std::size_t k = 0; k < params.size(); ++k)
    for (std::size_t j = 0; j < u.modules.size(); ++j)
      if (params[k].first.rfind(u.modules[j].first + ".", 0) == 0) u.of_param[k] = static_cast<int>(j);
  return u;
}

}  // namespace strata::detail
