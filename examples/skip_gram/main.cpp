// Word vectors by skip-gram with negative sampling (word2vec) on the words of Debian's
// fortunes package: two embedding tables with row-sparse gradients, each step touching only
// the rows of the words its batch holds, updated lazily (PyTorch's SparseAdam). The same loop
// under any strategy, picked at run time like the other trainers'. The last 10 % of the text
// is held out; at the end the chief prints the nearest neighbours of a few words. With
// --bigram-rows N a third table adds to each center word a vector of its bigram (the word
// before it and itself) hashed into N rows (fastText's word n-grams): a large table of which
// a step touches a few thousand rows.
//
//   skip_gram --steps 2000                                     (one device)
//   skip_gram --bigram-rows 1048576
//   skip_gram --strategy mirrored --replicas 2
//   mpirun -np 2 skip_gram --strategy multi_worker_mirrored --collective mpi
//   mpirun -np 3 skip_gram --strategy parameter_server --servers 1 --mode sync
//   mpirun -np 3 skip_gram --strategy parameter_server --servers 1 --mode async --bigram-rows 1048576
//   mpirun -np 3 skip_gram --strategy parameter_server --servers 2 --tables remote --bigram-rows 2097152
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <strata/data/words.hpp>
#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>

#include "../common/checkpoints.hpp"
#include "../common/run_flags.hpp"
#include "../common/strategy_flags.hpp"

namespace {

struct Options : trainer::StrategyFlags, trainer::RunFlags {
  std::int64_t dim = 64, window = 2, negatives = 5, min_count = 2;
  std::int64_t eval_every = 500, eval_rows = 20000, bigram_rows = 0;
  std::string table_gradient = "row_sparse", updates = "lazy";
  Options() {
    steps = 2000;
    batch = 1024;
    lr = 0.01;
    data_dir = strata::data::default_fortunes_dir();
  }
};

int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"Trains word vectors (skip-gram, negative sampling) on Debian's fortunes under any strategy; prints "
               "the held-out loss as it goes and the nearest neighbours of a few words at the end, then one JSON line.",
               "skip_gram"};
  trainer::add_run_flags(app, o, {.steps = "optimizer steps in all",
                                  .batch = "(center, context) pairs",
                                  .lr = "Adam's learning rate",
                                  .data = "the fortunes directory"});
  app.add_option("--dim", o.dim, "width of the word vectors")->capture_default_str();
  app.add_option("--window", o.window, "context words on each side")->capture_default_str();
  app.add_option("--negatives", o.negatives, "noise words per pair")->capture_default_str();
  app.add_option("--min-count", o.min_count, "occurrences a word needs to get a vector")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "steps between held-out losses")->capture_default_str();
  app.add_option("--eval-rows", o.eval_rows, "held-out pairs each evaluation reads")->capture_default_str();
  app.add_option("--bigram-rows", o.bigram_rows, "rows of the hashed-bigram table (0: none)")->capture_default_str();
  app.add_option("--table-gradient", o.table_gradient, "the tables' gradients: the rows looked up, or dense")
      ->check(CLI::IsMember({"row_sparse", "dense"}))->capture_default_str();
  app.add_option("--updates", o.updates, "the optimizer's rule on row-sparse tables")
      ->check(CLI::IsMember({"lazy", "dense"}))->capture_default_str();
  trainer::add_strategy_flags(app, o, "cpu (this trainer runs on the CPU)");
  try {
    app.parse(argc, argv);
    for (auto [flag, v] : {std::pair{"--steps", o.steps}, std::pair{"--dim", o.dim},
                           std::pair{"--window", o.window}, std::pair{"--min-count", o.min_count},
                           std::pair{"--eval-every", o.eval_every}, std::pair{"--eval-rows", o.eval_rows}})
      if (v < 1) throw CLI::ValidationError(flag, "must be at least 1, got " + std::to_string(v));
    if (o.negatives < 0) throw CLI::ValidationError("--negatives", "must not be negative");
    if (o.bigram_rows < 0) throw CLI::ValidationError("--bigram-rows", "must not be negative");
    trainer::check_strategy_flags(app, o);
    if (o.device != "cpu") throw CLI::ValidationError("--device", "this trainer runs on the CPU");
    trainer::check_run_flags(app, o, o.strategy == "parameter_server" && o.mode == "async");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

/// Two tables of word vectors: "in" for a pair's center word, "out" for its context and the
/// noise words; with `bigram_rows`, a third, "bigrams", whose row for the center's bigram is
/// added to the center's vector. Rows [B, 2 + k (+ 1)] (center, context, k negatives, and
/// the bigram's row) -> logits [B, 1 + k]: the center's vector against the others'.
class SkipGram : public strata::nn::Module {
 public:
  SkipGram(std::int64_t vocabulary, std::int64_t dim, strata::TableGradient g, std::int64_t bigram_rows) {
    auto& gen = strata::default_generator();
    in_ = &make_module<strata::nn::Embedding>("in", vocabulary, dim, gen, strata::DType::f32, g);
    out_ = &make_module<strata::nn::Embedding>("out", vocabulary, dim, gen, strata::DType::f32, g);
    strata::Tensor in = in_->weight(), out = out_->weight();  // word2vec's start: small input vectors, zero output ones
    strata::nn::init::uniform_(in, 0.5 / static_cast<double>(dim), gen);
    out.fill_(0.0);
    if (bigram_rows > 0) {
      bigrams_ = &make_module<strata::nn::Embedding>("bigrams", bigram_rows, dim, gen, strata::DType::f32, g);
      strata::Tensor b = bigrams_->weight();
      strata::nn::init::uniform_(b, 0.5 / static_cast<double>(dim), gen);
    }
  }
  strata::Tensor forward(const strata::Tensor& rows) override {
    const std::int64_t last = rows.dim(1) - (bigrams_ ? 1 : 0);
    strata::Tensor center = (*in_)(strata::slice(rows, 1, 0, 1));                    // [B, 1, D]
    if (bigrams_) center = center + (*bigrams_)(strata::slice(rows, 1, last, last + 1));
    const strata::Tensor others = (*out_)(strata::slice(rows, 1, 1, last));          // [B, 1 + k, D]
    return strata::vecdot(others, center);  // sum(others * center, {2}) in one pass
  }
  const strata::Tensor& vectors() const { return in_->weight(); }

 private:
  strata::nn::Embedding *in_, *out_, *bigrams_ = nullptr;
};

/// The loss of a pair: -log s(center . context) - sum log s(-center . noise), from logits
/// [B, 1 + k]; summed over the rows and divided by `global` (the global batch).
strata::Tensor pair_loss(const strata::Tensor& logits, std::int64_t global) {
  const std::int64_t b = logits.dim(0), k1 = logits.dim(1);
  std::vector<float> t(static_cast<std::size_t>(b * k1), 0.0f);
  for (std::int64_t i = 0; i < b; ++i) t[static_cast<std::size_t>(i * k1)] = 1.0f;
  const strata::Tensor targets = strata::from_vector<float>({b, k1}, t);
  // bce_with_logits averages a row's 1 + k terms; the pair's loss is their sum.
  return strata::nn::bce_with_logits(logits, targets, strata::nn::Reduction::sum_over_global_batch, global) *
         static_cast<double>(k1);
}

double held_out_loss(SkipGram& model, const strata::data::TensorDataset& rows) {
  strata::NoGradGuard no_grad;
  double total = 0;
  for (const auto& b : strata::data::Pipeline(rows).batch(4096))
    total += pair_loss(model(b.x), rows.size()).item();
  return total;
}

/// The `n` words whose vectors are nearest to `word`'s by cosine.
std::string neighbours(const SkipGram& model, const strata::data::WordCorpus& corpus, const std::string& word, int n) {
  const std::int64_t w = corpus.id(word);
  if (w < 0) return word + ": (not in the vocabulary)";
  const strata::Tensor& v = model.vectors();
  const std::int64_t V = v.dim(0), D = v.dim(1);
  const float* p = v.data<float>();
  std::vector<double> norm(static_cast<std::size_t>(V));
  for (std::int64_t r = 0; r < V; ++r) {
    double s = 0;
    for (std::int64_t c = 0; c < D; ++c) s += double(p[r * D + c]) * p[r * D + c];
    norm[static_cast<std::size_t>(r)] = std::sqrt(s) + 1e-12;
  }
  std::vector<std::pair<double, std::int64_t>> score;
  for (std::int64_t r = 0; r < V; ++r) {
    if (r == w) continue;
    double s = 0;
    for (std::int64_t c = 0; c < D; ++c) s += double(p[w * D + c]) * p[r * D + c];
    score.emplace_back(s / (norm[static_cast<std::size_t>(w)] * norm[static_cast<std::size_t>(r)]), r);
  }
  const auto top = std::min<std::size_t>(static_cast<std::size_t>(n), score.size());
  std::partial_sort(score.begin(), score.begin() + static_cast<std::ptrdiff_t>(top), score.end(), std::greater<>());
  std::string out = word + ":";
  for (std::size_t i = 0; i < top; ++i) out += " " + corpus.word(score[i].second);
  return out;
}

/// This process's resident memory now, in MiB (-1 where /proc does not say).
double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = -1;
  if (!(statm >> pages >> resident)) return -1;
  return resident * 4096.0 / (1024.0 * 1024.0);
}

/// A count for the JSON line, or null where there is none (negative).
std::string json_number(double v) { return v < 0 ? "null" : std::to_string(static_cast<long long>(v)); }

template <strata::Strategy S>
void train(S& strategy, const Options& o) {
  using Clock = std::chrono::steady_clock;
  const strata::data::WordCorpus corpus(strata::data::fortunes_text(o.data_dir), o.min_count);
  const std::span<const std::int64_t> all(corpus.tokens());
  const std::size_t split = all.size() * 9 / 10;  // a fixed held-out tail
  strata::Generator rows_gen(o.seed + 7), held_gen(12345);
  const auto train_rows = strata::data::TensorDataset(strata::data::Inputs(
      strata::data::skip_gram_rows(all.first(split), corpus.counts(), o.window, o.negatives, rows_gen, o.bigram_rows)));
  const strata::Tensor tail =
      strata::data::skip_gram_rows(all.subspan(split), corpus.counts(), o.window, o.negatives, held_gen, o.bigram_rows);
  const auto held_out = strata::data::TensorDataset(strata::data::Inputs(
      strata::data::slice_rows(tail, 0, std::min(o.eval_rows, tail.dim(0)))));

  strata::manual_seed(o.seed);
  const auto grad = o.table_gradient == "dense" ? strata::TableGradient::dense : strata::TableGradient::row_sparse;
  auto model = strategy.scope([&] { return SkipGram(corpus.vocabulary_size(), o.dim, grad, o.bigram_rows); });
  auto opt = strategy.scope([&] { return strata::optim::Adam(model.parameters(), o.lr); });
  opt.set_sparse_updates(o.updates == "dense" ? strata::optim::SparseUpdates::dense : strata::optim::SparseUpdates::lazy);
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();  // fp16
  auto pipeline = strata::data::Pipeline(train_rows).shuffle(o.seed).batch(trainer::global_batch_of(o, strategy.num_replicas_in_sync()));
  const bool report = strategy.is_chief() && !o.quiet;
  if (report)
    std::printf("%zu words (%lld distinct, seen %lld+ times), %lld training and %lld held-out pairs; %s\n", all.size(),
                static_cast<long long>(corpus.vocabulary_size()), static_cast<long long>(o.min_count),
                static_cast<long long>(train_rows.size()), static_cast<long long>(held_out.size()), S::name);

  // Checkpoints: resume from the newest complete one, then save every N steps and at the end.
  trainer::Checkpoints checkpoints(strategy, model, opt, o);
  strata::checkpoint::TrainingPosition pos = checkpoints.resume();

  // Whole epochs, then the first batches of one more, as in the other trainers.
  const std::int64_t per_epoch = pipeline.num_batches();
  const std::int64_t first_step = pos.step;  // "steps" in the JSON line: this run's
  std::int64_t step = pos.step, pairs = 0;
  double loss = 0, held = NAN, seconds = 0;  // the training steps' time (evaluation left out)
  double resident = -1;  // the most memory resident at a step's end (a parameter-server worker's remote tables: its batch's)
  std::vector<double> step_ms;
  step_ms.reserve(static_cast<std::size_t>(o.steps));
  for (std::int64_t epoch = pos.epoch, done = pos.epoch * per_epoch; done < o.steps; ++epoch) {
    const std::int64_t now = std::min(per_epoch, o.steps - done);
    std::int64_t in_epoch = epoch == pos.epoch ? pos.batch : 0;  // batches of this epoch done
    strata::data::Pipeline part = pipeline.take(now);
    part.set_position(epoch, in_epoch);
    for (auto& batch : strategy.distribute(part)) {
      const auto t0 = Clock::now();
      auto losses = strategy.run(
          [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
            strata::Tensor l = pair_loss(model(b.x), b.global_size);
            opt.apply_gradients(ctx, strata::grad(opt.scale_loss(l), model.parameters()));
            return l;
          },
          batch);
      loss = strategy.reduce(strata::ReduceOp::Sum, losses).item();
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      seconds += step_ms.back() / 1000;
      resident = std::max(resident, resident_mib());
      pairs += batch.global_size;
      ++step;
      const bool epoch_done = ++in_epoch == per_epoch;  // the position of the next batch
      pos = {step, epoch_done ? epoch + 1 : epoch, epoch_done ? 0 : in_epoch};
      checkpoints.after_step(pos);
      if (step % o.eval_every == 0 || step == o.steps) {
        SkipGram& mine = model;  // this process's copy
        held = held_out_loss(mine, held_out);
        if (report)
          std::printf("step %lld  epoch %lld  train %.4f  held-out %.4f\n", static_cast<long long>(step),
                      static_cast<long long>(epoch), loss, held);
      }
    }
    done += now;
  }
  checkpoints.finish(pos);
  const std::size_t warmup = std::min<std::size_t>(10, step_ms.size() / 10);  // the median after a short warm-up
  std::sort(step_ms.begin() + static_cast<std::ptrdiff_t>(warmup), step_ms.end());
  const double median_ms = step_ms.empty() ? 0.0 : step_ms[warmup + (step_ms.size() - warmup) / 2];
  // What this replica sent for the tables per step (a parameter-server worker: everything it
  // pushed), against the tables' dense bytes and the lower bound (its touched rows and their
  // indices), where the strategy counts them.
  double sent = -1, touched = -1, pulled = -1, dense_bytes = 0;
  SkipGram& local = model;  // this process's copy
  for (const strata::Tensor& p : local.parameters()) dense_bytes += static_cast<double>(p.nbytes());
  if constexpr (requires { strategy.gradient_stats(); }) {
    const strata::GradientStats st = strategy.gradient_stats();
    if (st.steps > 0) {
      sent = st.table_bytes_sent / static_cast<double>(st.steps);
      touched = st.table_touched_bytes / static_cast<double>(st.steps);
    }
  }
  if constexpr (requires { strategy.transfer_stats(); }) {  // a parameter-server worker: its pushes
    const strata::ps::TransferStats st = strategy.transfer_stats();
    if (st.steps > 0) {
      sent = st.pushed_bytes / static_cast<double>(st.steps);
      pulled = st.pulled_bytes / static_cast<double>(st.steps);
      touched = st.touched_bytes > 0 ? st.touched_bytes / static_cast<double>(st.steps) : -1;  // whole: not counted
    }
  }
  if (strategy.is_chief()) {
    const SkipGram& mine = model;
    // A worker of dispatched batches runs its share of the steps, maybe none a multiple of
    // --eval-every: the held-out loss at its end.
    if (std::isnan(held)) held = held_out_loss(local, held_out);
    if (!o.quiet && sent >= 0)
      std::printf("tables: %.0f bytes sent per step (dense: %.0f, %.0fx more; touched rows: %.0f)%s\n", sent,
                  dense_bytes, dense_bytes / std::max(sent, 1.0), touched,
                  pulled >= 0 ? (", " + std::to_string(static_cast<long long>(pulled)) + " received").c_str() : "");
    if (!o.quiet)
      for (const char* w : {"love", "money", "computer", "woman", "night"})
        std::printf("%s\n", neighbours(mine, corpus, w, 6).c_str());
    std::printf("{\"model\":\"skip_gram\",\"strategy\":\"%s\",\"replicas\":%d,\"steps\":%lld,\"train_loss\":%.5f,"
                "\"held_out_loss\":%.5f,\"pairs_per_s\":%.1f,\"median_step_ms\":%.4f,\"bigram_rows\":%lld,"
                "\"table_bytes_per_step\":%s,\"touched_bytes_per_step\":%s,\"received_bytes_per_step\":%s,"
                "\"dense_table_bytes\":%.0f,\"resident_mib_in_steps\":%.1f}\n",
                S::name, strategy.num_replicas_in_sync(), static_cast<long long>(step - first_step), loss, held,
                static_cast<double>(pairs) / seconds, median_ms, static_cast<long long>(o.bigram_rows),
                json_number(sent).c_str(), json_number(touched).c_str(), json_number(pulled).c_str(), dense_bytes, resident);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  if (const int status = parse_options(argc, argv, o); status >= 0) return status;
  const strata::precision::Scope precision(strata::precision::from_name(o.precision));  // every replica's
  trainer::with_strategy(o, [&](auto& strategy) { train(strategy, o); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "skip_gram: %s\n", e.what());
  strata::runtime::fail_job(e.what());
  return 1;
}
