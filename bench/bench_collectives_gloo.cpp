// strata::collective::Gloo beside raw Gloo in the same run (strata-run -np 2): for each size, the median over iterations of the slowest rank's time for
// strata's call and Gloo's own call of the same collective (alternating which goes first),
// then for each classic Gloo algorithm; busbw as in nccl-tests (PERF.md). Raw algorithms:
//   allreduce: gloo::allreduce (Gloo's own sum), classic AllreduceRingChunked, AllreduceHalvingDoubling
//   broadcast: gloo::broadcast, classic BroadcastOneToAll
//   allgather: gloo::allgather, classic AllgatherRing
// Gloo's own calls run on strata's context (same connections: the comparison is of the calls
// alone); the classic algorithms on a second communicator, since run on the same connections
// they leave them stalling for every later call (docs/collectives.md).
// One JSON line per (collective, size) with every figure and the ratio strata / best raw.
//
//   strata-run -np 2 bench_collectives_gloo [--max-bytes 268435456]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/math.h>

#include <strata/collective/gloo.hpp>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// One collective at one size: the raw candidates and strata, timed in turn each iteration.
struct Series {
  const char* op;
  double factor;  // busbw = bytes / time * factor
  std::vector<std::pair<const char*, std::function<void()>>> raw;
  std::function<void()> ours;
  std::vector<std::vector<double>> t_raw;
  std::vector<double> t_ours;
};

}  // namespace

int main(int argc, char** argv) {
  std::size_t max_bytes = std::size_t{256} << 20;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
  strata::collective::Gloo c("bench"), classic("bench-classic");
  const std::shared_ptr<gloo::Context> ctx = c.context(), classic_ctx = classic.context();
  STRATA_CHECK(ctx != nullptr, "bench_collectives_gloo needs at least 2 ranks (strata-run -np 2)");
  const int n = c.size();
  auto slowest = [&](double s) {
    std::vector<double> v{s};
    c.allreduce(std::span(v), strata::ReduceOp::Max);
    return v[0];
  };
  auto timed = [&](const std::function<void()>& f) {
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return slowest(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  };
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const std::size_t count = bytes / sizeof(float);
    const std::size_t share = count / static_cast<std::size_t>(n);
    const int iters = bytes <= (1u << 20) ? 200 : bytes <= (16u << 20) ? 60 : bytes <= (64u << 20) ? 21 : 9;
    std::vector<float> x(count, 1.0f), mine(share, 1.0f), all(share * static_cast<std::size_t>(n));
    std::vector<float*> ptrs{x.data()};
    gloo::AllreduceRingChunked<float> ring(classic_ctx, ptrs, static_cast<int>(count));
    gloo::AllreduceHalvingDoubling<float> hd(classic_ctx, ptrs, static_cast<int>(count));
    gloo::BroadcastOneToAll<float> one_to_all(classic_ctx, ptrs, count, 0);
    gloo::AllgatherRing<float> gather_ring(classic_ctx, {mine.data()}, all.data(), static_cast<int>(share));

    Series ar{"allreduce", 2.0 * (n - 1) / n, {}, {}, {}, {}};
    ar.raw.emplace_back("allreduce", [&] {
      gloo::AllreduceOptions o(ctx);
      o.setOutput(x.data(), count);
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(o);
    });
    ar.raw.emplace_back("ring_chunked", [&] { ring.run(); });
    ar.raw.emplace_back("halving_doubling", [&] { hd.run(); });
    ar.ours = [&] { c.allreduce(std::span(x), strata::ReduceOp::Sum); };

    Series bc{"broadcast", 1.0, {}, {}, {}, {}};
    bc.raw.emplace_back("broadcast", [&] {
      gloo::BroadcastOptions o(ctx);
      o.setRoot(0);
      o.setOutput(x.data(), count);
      gloo::broadcast(o);
    });
    bc.raw.emplace_back("one_to_all", [&] { one_to_all.run(); });
    bc.ours = [&] { c.broadcast(std::span(x), 0); };

    Series ag{"allgather", double(n - 1) / n, {}, {}, {}, {}};
    ag.raw.emplace_back("allgather", [&] {
      gloo::AllgatherOptions o(ctx);
      o.setInput(mine.data(), share);
      o.setOutput(all.data(), all.size());
      gloo::allgather(o);
    });
    ag.raw.emplace_back("ring", [&] { gather_ring.run(); });
    ag.ours = [&] { c.allgather(std::span<const float>(mine), std::span(all)); };

    for (Series* s : {&ar, &bc, &ag}) {
      // strata against Gloo's own call of the same collective, alternating who goes first;
      // then the classic algorithms, each in turn.
      s->t_raw.resize(s->raw.size());
      for (int it = 0; it < iters; ++it) {
        if (it % 2) s->t_ours.push_back(timed(s->ours));
        s->t_raw[0].push_back(timed(s->raw[0].second));
        if (it % 2 == 0) s->t_ours.push_back(timed(s->ours));
      }
      for (std::size_t k = 1; k < s->raw.size(); ++k)
        for (int it = 0; it < iters; ++it) s->t_raw[k].push_back(timed(s->raw[k].second));
      if (c.rank() != 0) continue;
      const double gb = static_cast<double>(s == &ag ? all.size() * sizeof(float) : bytes) / 1e9;
      const double ours = gb / median(s->t_ours) * s->factor;
      double best = 0;
      std::string fields;
      for (std::size_t k = 0; k < s->raw.size(); ++k) {
        const double bw = gb / median(s->t_raw[k]) * s->factor;
        best = std::max(best, bw);
        char buf[96];
        std::snprintf(buf, sizeof buf, "\"raw_%s_busbw_gbs\":%.3f,", s->raw[k].first, bw);
        fields += buf;
      }
      std::printf("{\"bench\":\"collective\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,%s\"strata_busbw_gbs\":%.3f,"
                  "\"strata_ms\":%.3f,\"ratio_vs_best_raw\":%.3f}\n",
                  s->op, n, bytes, fields.c_str(), ours, median(s->t_ours) * 1e3, ours / best);
    }
    std::fflush(stdout);
  }
}
