// An elastic MultiWorkerMirrored<Gloo> trainer for run_elastic.sh (under strata-run --elastic):
// a small regression model on fixed synthetic data, per-rank batch 16, the epoch cut by global
// example offset (elastic::GlobalOrder). The process started as rank KILL_RANK SIGKILLs itself
// at global step KILL_STEP; the survivors take the next view, the state of its member 0 (a
// survivor), and go on. A process started outside strata-run with the job's STRATA_ELASTIC,
// STRATA_MASTER_ADDR/PORT and STRATA_JOB_TOKEN joins at the next step boundary and receives
// the state. STEP_MS slows each step (time for a joiner to arrive). Each process logs, one
// line each:
//   start <unix ms>
//   kill <unix ms>                                     (the victim, just before its SIGKILL)
//   generation G rank R of N resumes at step S offset O epoch E after <reason>
//   first step of generation G done at <unix ms>
//   step S generation G rows i,j,...                   (the rows this rank trained at step S)
//   done: step S parameters <hash> identical on N ranks
//
//   elastic_trainer EPOCHS KILL_RANK KILL_STEP [STEP_MS]
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/gloo.hpp>
#include <strata/strata.hpp>
#include <strata/strategy/elastic.hpp>

using namespace strata;

namespace {
constexpr std::int64_t kExamples = 1000, kFeatures = 16, kPerRank = 16;

long long unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// FNV-1a over the parameters' bytes: equal on every rank iff the parameters are bit-identical.
std::int64_t hash_of(const std::vector<Tensor>& params) {
  std::uint64_t h = 1469598103934665603ull;
  for (const Tensor& p : params) {
    const auto* b = static_cast<const unsigned char*>(p.raw_data());
    for (std::size_t i = 0; i < static_cast<std::size_t>(p.numel()) * size_of(p.dtype()); ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  return static_cast<std::int64_t>(h >> 1);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: elastic_trainer EPOCHS KILL_RANK KILL_STEP [STEP_MS]\n");
    return 2;
  }
  std::printf("start %lld\n", unix_ms());
  const std::int64_t epochs = std::atoll(argv[1]), kill_step = std::atoll(argv[3]);
  const int step_ms = argc == 5 ? std::atoi(argv[4]) : 0;
  const int kill_rank = std::atoi(argv[2]);
  const int started_as = runtime::detect_process().rank;
  try {
    // Fixed data: y = x·w + noise, the same on every process.
    Generator data_gen(7);
    const Tensor x = normal({kExamples, kFeatures}, 0.0, 1.0, data_gen);
    const Tensor w = normal({kFeatures, 1}, 0.0, 1.0, data_gen);
    const Tensor y = add(matmul(x, w), normal({kExamples, 1}, 0.0, 0.1, data_gen));
    auto rows_of = [](const Tensor& t, const std::vector<std::int64_t>& rows) {
      const std::int64_t width = t.shape()[1];
      Tensor out = Tensor::empty({static_cast<std::int64_t>(rows.size()), width}, t.dtype());
      const float* src = static_cast<const float*>(t.raw_data());
      float* dst = static_cast<float*>(out.raw_data());
      for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(dst + i * width, src + rows[i] * width, width * sizeof(float));
      return out;
    };

    elastic::Member member;
    elastic::GlobalOrder order(kExamples, 11);
    std::vector<unsigned char> state;  // the last generation's state, in memory
    std::int64_t step = 0;
    std::string after = "the start";
    for (;;) {
      MultiWorkerOptions mo;
      mo.split_update = UpdateSplit::off;  // every rank updates all of its copy: a failed step leaves it whole
      MultiWorkerMirroredStrategy<collective::Gloo> strategy(mo, member.process(), member.prefix(),
                                                             collective::Options::from_env());
      auto model = strategy.scope([] { return nn::Sequential(nn::Linear(kFeatures, 32), nn::ReLU(), nn::Linear(32, 1)); });
      optim::Sgd opt(model.parameters(), 0.02, 0.9);
      if (member.generation() > 1) {  // member 0 of the view is a survivor: its state goes to all
        std::vector<unsigned char> bytes = strategy.is_chief() ? state : std::vector<unsigned char>{};
        strategy.share_from_chief(bytes);
        const checkpoint::Reader r(std::move(bytes), "the state of generation " + std::to_string(member.generation() - 1));
        const auto saved_replicas = static_cast<int>(r.read("replicas").item());
        const checkpoint::TrainingPosition pos = checkpoint::restore_training_state(r, model.parameters(), opt, saved_replicas);
        step = pos.step;
        order.seek(pos.epoch, pos.batch);  // `batch` holds the epoch's global offset here
      }
      const int rank = strategy.rank(), n = strategy.num_replicas_in_sync();
      std::printf("generation %llu rank %d of %d resumes at step %lld offset %lld epoch %lld after %s\n",
                  static_cast<unsigned long long>(member.generation()), rank, n, static_cast<long long>(step),
                  static_cast<long long>(order.offset()), static_cast<long long>(order.epoch()), after.c_str());
      std::fflush(stdout);
      bool changed = false, failed = false, first = true;
      try {
        while (order.epoch() < epochs) {
          if (step == kill_step && started_as == kill_rank) {
            std::printf("kill %lld\n", unix_ms());
            std::fflush(stdout);
            std::raise(SIGKILL);
          }
          if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
          const std::vector<std::int64_t> rows = order.rows(rank, kPerRank);
          const std::int64_t global = order.step_rows(n, kPerRank);
          const Tensor bx = rows_of(x, rows), by = rows_of(y, rows);
          strategy.run([&](ReplicaContext& ctx) {
            Tensor loss = nn::mse_loss(model(bx), by, nn::Reduction::sum_over_global_batch, global);
            opt.apply_gradients(ctx, grad(loss, model.parameters()));
            return loss;
          });
          std::string list;
          for (std::int64_t r : rows) list += (list.empty() ? "" : ",") + std::to_string(r);
          std::printf("step %lld generation %llu epoch %lld rows %s\n", static_cast<long long>(step),
                      static_cast<unsigned long long>(member.generation()), static_cast<long long>(order.epoch()),
                      list.empty() ? "-" : list.c_str());
          std::fflush(stdout);
          order.advance(n, kPerRank);
          ++step;
          if (first) {
            std::printf("first step of generation %llu done at %lld\n", static_cast<unsigned long long>(member.generation()),
                        unix_ms());
            first = false;
          }
          if (member.changed(strategy)) {
            changed = true;
            after = "a change of membership";
            break;
          }
        }
      } catch (const collective_error& e) {  // a peer lost
        failed = true;
        after = std::string("a failed step: ") + e.what();
      } catch (const timeout_error& e) {  // a peer that does not answer
        failed = true;
        after = std::string("a failed step: ") + e.what();
      }
      std::fflush(stdout);
      const bool done = order.epoch() >= epochs && !failed && !changed;
      if (done) {
        std::int64_t h[2] = {hash_of(model.parameters()), 0};
        h[1] = -h[0];
        strategy.collective().allreduce_raw(h, h, 2, DType::i64, ReduceOp::Max);  // max of h and of -h: equal iff all equal
        std::printf("done: step %lld parameters %lld %s on %d ranks\n", static_cast<long long>(step),
                    static_cast<long long>(hash_of(model.parameters())), h[0] == -h[1] ? "identical" : "DIFFER", n);
        return h[0] == -h[1] ? 0 : 1;
      }
      // The state this process holds at the last step it completed, for the next generation.
      state = checkpoint::encode(checkpoint::capture_training_state(model.parameters(), opt,
                                                                    {step, order.epoch(), order.offset()}, n));
      member.next();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_trainer: %s\n", e.what());
    return 1;
  }
}
