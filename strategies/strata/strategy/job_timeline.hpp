/// \file
/// The job's timeline in one trace: every process's events gathered to the chief through the
/// strategy's own collectives (no shared file system, so ranks on several hosts work as ranks
/// on one), each process's timestamps first moved onto the chief's clock. Processes on one
/// host share the steady clock; processes on different hosts do not, and their traces would
/// otherwise sit seconds or days apart on Perfetto's time axis (Horovod avoids this by having
/// only its coordinator write; here every rank records its own spans).
///
/// chief_clock_offset estimates the offset the way a barrier sees it: R rounds of an
/// all-reduce (every process leaves it within the collective's one-way latency of the
/// others), each process reading its clock as it leaves; the offset is the median over the
/// rounds of the chief's reading minus this process's. The error is that exit skew (µs on
/// one host, one network hop across hosts), far below the millisecond spans of a step.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <strata/observe/timeline.hpp>
#include <strata/strategy/replica_context.hpp>
#include <strata/strategy/replicated.hpp>  // current_local_replica
#include <strata/strategy/strategy.hpp>
#include <strata/tensor/factory.hpp>

namespace strata {

namespace detail {
/// The steady clock in nanoseconds: what the timeline records.
inline std::int64_t steady_now_ns() noexcept {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

/// Strategies that can gather a tensor from every replica (all but ParameterServerStrategy,
/// whose servers run no steps).
template <class S>
concept GathersTensors = Strategy<S> && requires(S& s, const PerReplica<Tensor>& v) {
  { s.gather(v) } -> std::same_as<Tensor>;
};

/// The replica id of this process's first local replica: its row in a gather.
template <class S>
int first_replica_id(S& strategy) {
  const PerReplica<double> ids =
      strategy.run([](ReplicaContext& ctx) { return static_cast<double>(ctx.replica_id_in_sync_group()); });
  return static_cast<int>(ids[0]);
}
}  // namespace detail

/// The chief's clock minus this process's, in nanoseconds (see the file comment); the same
/// call on every process. `now` reads this process's clock (the steady clock by default).
template <detail::GathersTensors S, class Now = std::int64_t (*)() noexcept>
std::int64_t chief_clock_offset(S& strategy, int rounds = 15, Now now = &detail::steady_now_ns) {
  STRATA_CHECK(rounds >= 1, "chief_clock_offset: rounds must be at least 1, got ", rounds);
  std::vector<std::int64_t> mine(static_cast<std::size_t>(rounds));
  for (auto& t : mine) {
    strategy.reduce(ReduceOp::Sum, strategy.run([](ReplicaContext&) { return 0.0; }));
    t = now();
  }
  const int row = detail::first_replica_id(strategy);
  const Shape shape{1, static_cast<std::int64_t>(rounds)};
  const Tensor all = strategy.gather(strategy.run([&](ReplicaContext&) { return from_vector(shape, mine); }));
  const std::int64_t* t = all.template data<std::int64_t>();
  std::vector<std::int64_t> diffs(mine.size());
  for (std::size_t k = 0; k < mine.size(); ++k)
    diffs[k] = t[k] - t[static_cast<std::size_t>(row) * mine.size() + k];  // row 0: the chief's readings
  std::nth_element(diffs.begin(), diffs.begin() + static_cast<std::ptrdiff_t>(diffs.size() / 2), diffs.end());
  return diffs[diffs.size() / 2];
}

/// Writes every process's timeline events into one Chrome trace at `path` on the chief, on
/// the chief's clock (chief_clock_offset, then Timeline::set_clock_offset); the other
/// processes write nothing. The same call on every process, outside run().
template <detail::GathersTensors S, class Now = std::int64_t (*)() noexcept>
void write_job_timeline(S& strategy, const std::string& path, Now now = &detail::steady_now_ns) {
  auto& timeline = observe::Timeline::instance();
  timeline.set_clock_offset(chief_clock_offset(strategy, 15, now));
  const std::string lines = timeline.event_lines();
  // One row of bytes per process (its first replica's), empty rows for the others.
  const Tensor all = strategy.gather(strategy.run([&](ReplicaContext&) {
    const bool first = current_local_replica() == 0;
    Tensor t = Tensor::empty(Shape{first ? static_cast<std::int64_t>(lines.size()) : 0}, DType::u8);
    if (first && !lines.empty()) std::memcpy(t.raw_data(), lines.data(), lines.size());
    return t;
  }));
  if (strategy.is_chief())
    observe::Timeline::write_trace(path, std::string_view(static_cast<const char*>(all.raw_data()),
                                                          static_cast<std::size_t>(all.numel())));
}

}  // namespace strata
