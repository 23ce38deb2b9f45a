// The collective conformance suite, written once: each policy's test program defines
// World<Policy>::run(n, fn) (run fn on n ranks of a group) and invokes the suites with
// TEST_CASE_TEMPLATE_INVOKE. Results are checked against a serial reference in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>  // setenv
#include <functional>
#include <string>
#include <span>
#include <vector>

#include "doctest.hpp"

#include <strata/collective/capabilities.hpp>
#include <strata/collective/collective.hpp>
#include <strata/support/error.hpp>
#include <strata/tensor/half.hpp>
#include <strata/tensor/tensor.hpp>

/// How a test runs `n` ranks of a policy; specialised by each policy's test program.
template <class P>
struct World;

namespace conformance {

using strata::ReduceOp;

/// Integer-valued inputs, exact in every dtype (including fp16/bf16) and every sum here.
inline double value(int rank, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::Prod) return static_cast<double>((i + static_cast<std::size_t>(rank)) % 2 + 1);
  return static_cast<double>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 11) - 5);
}

template <class S>
S cast(double v) {
  if constexpr (std::is_same_v<S, strata::Half> || std::is_same_v<S, strata::BFloat16>)
    return S(static_cast<float>(v));
  else
    return static_cast<S>(v);
}
template <class S>
double uncast(S v) {
  if constexpr (std::is_same_v<S, strata::Half> || std::is_same_v<S, strata::BFloat16>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<double>(v);
}

/// The reduction of every rank's element i, as the policy must produce it.
template <class S, class A>
double expected(int n, std::size_t i, ReduceOp op) {
  double r = value(0, i, op);
  for (int k = 1; k < n; ++k) {
    const double v = value(k, i, op);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Mean: r += v; break;
      case ReduceOp::Prod: r *= v; break;
      case ReduceOp::Min: r = std::min(r, v); break;
      case ReduceOp::Max: r = std::max(r, v); break;
    }
  }
  if (op == ReduceOp::Mean) return uncast<S>(cast<S>(static_cast<double>(static_cast<A>(r) / static_cast<A>(n))));
  return r;
}

template <class P, class S, class A>
void check_allreduce(int n, std::size_t count, ReduceOp op) {
  World<P>::run(n, [&](P& c) {
    std::vector<S> x(count), y(count);
    for (std::size_t i = 0; i < count; ++i) x[i] = cast<S>(value(c.rank(), i, op));
    std::vector<S> in = x;
    c.allreduce(std::span(x), op);                                    // in place
    c.allreduce(std::span<const S>(in), std::span(y), op);            // out of place
    for (std::size_t i = 0; i < count; ++i) {
      const double want = expected<S, A>(n, i, op);
      if (uncast<S>(x[i]) != want || uncast<S>(y[i]) != want) {
        FAIL_CHECK("rank ", c.rank(), " of ", n, ", ", std::string(strata::name_of(op)), ", ", std::string(strata::name_of(strata::dtype_v<S>)),
                   " x ", count, ": element ", i, " is ", uncast<S>(x[i]), " / ", uncast<S>(y[i]), ", expected ", want);
        return;
      }
    }
  });
}

/// Reduce-scatter of n shares of `count` elements: rank r's result is share r of the
/// reduction, i.e. elements r * count .. (r + 1) * count of the serial reference.
template <class P, class S, class A>
void check_reduce_scatter(int n, std::size_t count, ReduceOp op) {
  World<P>::run(n, [&](P& c) {
    std::vector<S> in(count * static_cast<std::size_t>(n)), out(count);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = cast<S>(value(c.rank(), i, op));
    c.reduce_scatter(std::span<const S>(in), std::span(out), op);
    for (std::size_t i = 0; i < count; ++i) {
      const double want = expected<S, A>(n, static_cast<std::size_t>(c.rank()) * count + i, op);
      if (uncast<S>(out[i]) != want) {
        FAIL_CHECK("reduce_scatter on rank ", c.rank(), " of ", n, ", ", std::string(strata::name_of(op)), ", ",
                   std::string(strata::name_of(strata::dtype_v<S>)), " x ", count, ": element ", i, " is ", uncast<S>(out[i]),
                   ", expected ", want);
        return;
      }
    }
  });
}

template <class P, class S, class A>
void check_all_ops(int n, std::size_t count) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max, ReduceOp::Prod}) {
    check_allreduce<P, S, A>(n, count, op);
    check_reduce_scatter<P, S, A>(n, count, op);
  }
}

}  // namespace conformance

using namespace conformance;

TEST_CASE_TEMPLATE_DEFINE("Collective.Conformance.Allreduce", P, allreduce_suite) {
  for (int n = 1; n <= 4; ++n)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65536 / 4}}) {
      check_all_ops<P, float, float>(n, count);
      check_all_ops<P, double, double>(n, count);
      check_all_ops<P, std::int32_t, std::int32_t>(n, count);
      check_all_ops<P, std::int64_t, std::int64_t>(n, count);
      check_all_ops<P, strata::Half, float>(n, count);
      check_all_ops<P, strata::BFloat16, float>(n, count);
    }
  // The large, odd count on the types and ops where a chunking bug would show.
  for (int n : {2, 3, 4}) {
    check_allreduce<P, float, float>(n, (1u << 20) + 3, ReduceOp::Sum);
    check_allreduce<P, strata::BFloat16, float>(n, (1u << 20) + 3, ReduceOp::Max);
    check_reduce_scatter<P, float, float>(n, (1u << 18) + 3, ReduceOp::Sum);
  }
}

TEST_CASE_TEMPLATE_DEFINE("Collective.Conformance.BroadcastGatherScatterBarrier", P, data_movement_suite) {
  for (int n = 1; n <= 4; ++n)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      World<P>::run(n, [&](P& c) {
        for (int root = 0; root < n; ++root) {  // broadcast from every root
          std::vector<std::int64_t> x(count);
          for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<std::int64_t>(c.rank() * 1000000 + i);
          c.broadcast(std::span(x), root);
          for (std::size_t i = 0; i < count; ++i) CHECK(x[i] == static_cast<std::int64_t>(root * 1000000 + i));
        }
        std::vector<double> mine(count), all(count * static_cast<std::size_t>(n));
        for (std::size_t i = 0; i < count; ++i) mine[i] = c.rank() + 0.5 * static_cast<double>(i);
        c.allgather(std::span<const double>(mine), std::span(all));
        for (int k = 0; k < n; ++k)
          for (std::size_t i = 0; i < count; ++i)
            CHECK(all[static_cast<std::size_t>(k) * count + i] == k + 0.5 * static_cast<double>(i));
        std::vector<float> in(count * static_cast<std::size_t>(n)), out(count);
        for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(value(c.rank(), i, ReduceOp::Sum));
        c.reduce_scatter(std::span<const float>(in), std::span(out), ReduceOp::Sum);
        for (std::size_t i = 0; i < count; ++i)
          CHECK(out[i] == expected<float, float>(n, static_cast<std::size_t>(c.rank()) * count + i, ReduceOp::Sum));
        c.barrier();
      });
    }
  // allgather_raw in place: each rank's block of `out` is its input (20000: past the size from
  // which Mpi and Gloo stage it through the host's shared memory).
  if constexpr (strata::collective::RawCollective<P>)
    for (int n = 1; n <= 4; ++n)
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{20000}})
        World<P>::run(n, [&](P& c) {
          std::vector<float> all(count * static_cast<std::size_t>(n), -1.0f);
          float* mine = all.data() + static_cast<std::size_t>(c.rank()) * count;
          for (std::size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(value(c.rank(), i, ReduceOp::Sum));
          c.allgather_raw(mine, all.data(), count, strata::DType::f32);
          for (int k = 0; k < n; ++k)
            for (std::size_t i = 0; i < count; ++i)
              if (all[static_cast<std::size_t>(k) * count + i] != static_cast<float>(value(k, i, ReduceOp::Sum))) {
                FAIL_CHECK("in-place allgather of ", count, " on ", n, " ranks: element ", i, " of rank ", k, "'s block");
                return;
              }
        });
}

TEST_CASE_TEMPLATE_DEFINE("Collective.Conformance.AsyncAllreduceKeepsOrder", P, async_suite) {
  World<P>::run(3, [](P& c) {
    std::vector<std::vector<float>> bufs(8, std::vector<float>(5000));
    std::vector<decltype(c.iallreduce(std::span(bufs[0]), ReduceOp::Sum))> work;
    for (std::size_t b = 0; b < bufs.size(); ++b) {
      std::fill(bufs[b].begin(), bufs[b].end(), static_cast<float>(b * 10 + static_cast<std::size_t>(c.rank())));
      work.push_back(c.iallreduce(std::span(bufs[b]), ReduceOp::Sum));
    }
    for (auto& w : work) w.wait();
    for (std::size_t b = 0; b < bufs.size(); ++b) CHECK(bufs[b][4999] == static_cast<float>(3 * b * 10 + 3));
    std::vector<float> after(3, 1.0f);  // a blocking call after asynchronous ones
    c.allreduce(std::span(after), ReduceOp::Sum);
    CHECK(after[0] == 3.0f);
  });
}

// Asynchronous allgathers and reduce-scatters, several in flight with an all-reduce between
// them, each against the serial computation of its result; then a blocking call.
TEST_CASE_TEMPLATE_DEFINE("Collective.Conformance.AsyncAllgatherAndReduceScatter", P, async_gather_suite) {
  World<P>::run(3, [](P& c) {
    const int n = c.size(), r = c.rank();
    constexpr std::size_t kCount = 1001;  // per rank
    std::vector<std::vector<float>> mine(4, std::vector<float>(kCount)), gathered(4, std::vector<float>(kCount * 3));
    std::vector<std::vector<double>> full(4, std::vector<double>(kCount * 3)), share(4, std::vector<double>(kCount));
    std::vector<float> between(7, static_cast<float>(r + 1));
    const auto at = [](std::size_t b, int rank, std::size_t i) { return static_cast<double>(b * 1000 + static_cast<std::size_t>(rank) * 7 + i % 13); };
    using Work = decltype(c.iallgather(std::span<const float>(mine[0]), std::span(gathered[0])));
    std::vector<Work> gathers, scatters;
    for (std::size_t b = 0; b < mine.size(); ++b) {
      for (std::size_t i = 0; i < kCount; ++i) mine[b][i] = static_cast<float>(at(b, r, i));
      for (std::size_t i = 0; i < full[b].size(); ++i) full[b][i] = at(b, r, i);
      gathers.push_back(c.iallgather(std::span<const float>(mine[b]), std::span(gathered[b])));
      scatters.push_back(c.ireduce_scatter(std::span<const double>(full[b]), std::span(share[b]),
                                           b % 2 ? ReduceOp::Mean : ReduceOp::Sum));
      if (b == 1) c.iallreduce(std::span(between), ReduceOp::Sum).wait();
    }
    for (std::size_t b = 0; b < mine.size(); ++b) {
      gathers[b].wait();
      scatters[b].wait();
      bool gathered_ok = true, scattered_ok = true;
      for (int k = 0; k < n; ++k)
        for (std::size_t i = 0; i < kCount; ++i)
          gathered_ok = gathered_ok && gathered[b][static_cast<std::size_t>(k) * kCount + i] == static_cast<float>(at(b, k, i));
      for (std::size_t i = 0; i < kCount; ++i) {
        const std::size_t g = static_cast<std::size_t>(r) * kCount + i;  // this rank's share of element g
        double sum = 0;
        for (int k = 0; k < n; ++k) sum += at(b, k, g);
        scattered_ok = scattered_ok && share[b][i] == (b % 2 ? sum / n : sum);
      }
      CHECK(gathered_ok);
      CHECK(scattered_ok);
    }
    CHECK(between[0] == static_cast<float>(n * (n + 1) / 2));
    std::vector<float> after(3, 1.0f);
    c.allreduce(std::span(after), ReduceOp::Sum);
    CHECK(after[0] == static_cast<float>(n));
  });
}

namespace conformance {

/// RELIABILITY A5 cases: after 50 matching allreduces, rank 0 and the others call mismatched
/// collectives.
inline constexpr int kMismatchCases = 6;

/// Runs A5 case `k` on one rank of a communicator in debug mode (fingerprints checked) with at
/// least 2 ranks: every rank must fail with both calls and the differing field named — never
/// hang or compute. (A mismatch may leave the communicator unusable: InProcess aborts its
/// group; use a fresh one per case.)
template <class P>
void mismatch_case(P& c, int k) {
  REQUIRE(c.size() >= 2);
  std::vector<float> f(8, 1.0f), g(8 * static_cast<std::size_t>(c.size()));
  std::vector<std::int32_t> i(8, 1);
  for (int s = 0; s < 50; ++s) c.allreduce(std::span(f), ReduceOp::Max);
  struct Case {
    const char* name;
    std::function<void()> a, b;  // rank 0 calls a, the others b
    const char* differs;
  };
  const Case cases[kMismatchCases] = {
      {"allreduce vs broadcast", [&] { c.allreduce(std::span(f), ReduceOp::Sum); }, [&] { c.broadcast(std::span(f), 0); },
       "collective"},
      {"count 8 vs 4", [&] { c.allreduce(std::span(f), ReduceOp::Sum); },
       [&] { c.allreduce(std::span(f).first(4), ReduceOp::Sum); }, "count"},
      {"int32 vs float32", [&] { c.allreduce(std::span(i), ReduceOp::Sum); },
       [&] { c.allreduce(std::span(f), ReduceOp::Sum); }, "dtype"},
      {"sum vs max", [&] { c.allreduce(std::span(f), ReduceOp::Sum); }, [&] { c.allreduce(std::span(f), ReduceOp::Max); },
       "op"},
      {"broadcast vs allgather", [&] { c.broadcast(std::span(f), 0); },
       [&] { c.allgather(std::span<const float>(f), std::span(g)); }, "collective"},
      {"barrier vs allreduce", [&] { c.barrier(); }, [&] { c.allreduce(std::span(f), ReduceOp::Sum); }, "collective"},
  };
  const Case& m = cases[k];
  std::string what;
  try {
    (c.rank() == 0 ? m.a : m.b)();
  } catch (const strata::collective_error& e) {
    what = e.what();
  }
  INFO(m.name, ", rank ", c.rank(), ": ", what);
  CHECK(what.find("[strata.collective.mismatch]") != std::string::npos);
  CHECK(what.find("#50") != std::string::npos);  // the sequence number of the mismatched call
  CHECK(what.find(std::string("differs in: ") + m.differs) != std::string::npos);
}

}  // namespace conformance

namespace conformance {

/// An in-place allreduce of a buffer the group shares (shared_buffer: processes on one host)
/// for every op, on one buffer reused call after call, against the serial reference.
template <class P, class S, class A>
void check_shared_allreduce(int n, std::size_t count) {
  World<P>::run(n, [&](P& c) {
    strata::Tensor buf = c.shared_buffer(static_cast<std::int64_t>(count), strata::dtype_v<S>);
    if (n == 1) {  // nothing to share with
      CHECK_FALSE(buf.defined());
      return;
    }
    REQUIRE(buf.defined());
    S* x = buf.template data<S>();
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Min, ReduceOp::Max, ReduceOp::Prod}) {
      for (std::size_t i = 0; i < count; ++i) x[i] = cast<S>(value(c.rank(), i, op));
      c.allreduce_raw(x, x, count, strata::dtype_v<S>, op);
      for (std::size_t i = 0; i < count; ++i)
        if (uncast<S>(x[i]) != expected<S, A>(n, i, op)) {
          FAIL_CHECK("shared buffer, rank ", c.rank(), " of ", n, ", ", std::string(strata::name_of(op)), ", ",
                     std::string(strata::name_of(strata::dtype_v<S>)), " x ", count, ": element ", i, " is ",
                     uncast<S>(x[i]), ", expected ", expected<S, A>(n, i, op));
          return;
        }
    }
  });
}

}  // namespace conformance

TEST_CASE_TEMPLATE_DEFINE("Collective.Conformance.SharedBufferAllreduce", P, shared_buffer_suite) {
  for (int n = 1; n <= 4; ++n)
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65536 / 4}}) {
      check_shared_allreduce<P, float, float>(n, count);
      check_shared_allreduce<P, double, double>(n, count);
      check_shared_allreduce<P, std::int32_t, std::int32_t>(n, count);
      check_shared_allreduce<P, std::int64_t, std::int64_t>(n, count);
    }
  for (int n : {2, 3, 4}) check_shared_allreduce<P, float, float>(n, (1u << 20) + 3);
  // Peers and barriers: rank r writes r + 1 into its copy; after shared_sync every rank reads
  // every rank's copy through shared_peer, and writes into the next rank's; in a common
  // buffer every rank's element k is the same memory; a buffer asked for with sizes that
  // differ between ranks is an error on every rank, naming the sizes.
  for (int n : {2, 3, 4})
    World<P>::run(n, [](P& c) {
      strata::Tensor mine = c.shared_buffer(5, strata::DType::f32);
      REQUIRE(mine.defined());
      mine.fill_(c.rank() + 1.0);
      c.shared_sync(mine);
      for (int k = 0; k < c.size(); ++k)
        CHECK(c.shared_peer(mine, k).template to_vector<float>() == std::vector<float>(5, static_cast<float>(k + 1)));
      c.shared_sync(mine);  // every read done before any write
      c.shared_peer(mine, (c.rank() + 1) % c.size()).fill_(-c.rank());
      c.shared_sync(mine);
      const int from = (c.rank() + c.size() - 1) % c.size();
      CHECK(mine.template to_vector<float>() == std::vector<float>(5, static_cast<float>(-from)));
      strata::Tensor common = c.shared_buffer(c.size(), strata::DType::f32, /*common=*/true);
      REQUIRE(common.defined());
      common.template data<float>()[c.rank()] = static_cast<float>(10 * (c.rank() + 1));
      c.shared_sync(common);
      std::vector<float> all;
      for (int k = 0; k < c.size(); ++k) all.push_back(static_cast<float>(10 * (k + 1)));
      CHECK(common.template to_vector<float>() == all);
      c.shared_sync(common);  // every read done before the buffer goes
      CHECK_THROWS_WITH(c.shared_buffer(3 + c.rank(), strata::DType::f32), doctest::Contains("bytes, rank"));
    });
  // STRATA_SHM=0 on every rank: no shared buffers, the plain path carries the buckets.
  World<P>::run(2, [](P& c) {
    ::setenv("STRATA_SHM", "0", 1);
    CHECK_FALSE(c.shared_buffer(16, strata::DType::f32).defined());
    ::unsetenv("STRATA_SHM");
  });
}
