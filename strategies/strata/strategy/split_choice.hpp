/// \file
/// SplitChoiceOptions: how UpdateSplit::measured probes. The measurement, detail::SplitChoice,
/// is in detail/split_choice.hpp.
#pragma once


namespace strata {

/// How UpdateSplit::measured probes (MirroredOptions::split_choice,
/// MultiWorkerOptions::split_choice). The defaults suit steps of milliseconds.
struct SplitChoiceOptions {
  int warmup = 2;        ///< first steps not measured (first touches, the state made)
  int first_probe = 5;   ///< the step of the first probe of the way not held
  int probe_every = 64;  ///< steps between probes after a switch (up to 8 times that later)
  int probe_steps = 4;   ///< length of a probe (2..64); its first step, the switch, is not measured
  double margin = 0.1;   ///< the other way must cost this share less to be taken
};

}  // namespace strata
