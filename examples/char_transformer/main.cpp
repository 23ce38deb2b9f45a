// Character-level Transformer language model on the text of Debian's fortunes package: the
// reference causal Transformer (nanoGPT's shakespeare-char shape) trained by one loop written
// as a template over the strategy, picked at run time like the Fashion-MNIST trainer's. The
// last 10 % of the text is held out; the validation loss is in nats per character. At the end
// the chief samples a few lines of text.
//
//   char_transformer --steps 2000                                  (one device)
//   char_transformer --strategy mirrored --replicas 2
//   char_transformer_cuda --device cuda:0                          (with the kernels of cuda_kernels.cu)
//   mpirun -np 2 char_transformer --strategy multi_worker_mirrored --collective mpi
//   strata-run -np 2 char_transformer --strategy multi_worker_mirrored --collective gloo
//   mpirun -np 3 char_transformer --strategy parameter_server --servers 1 --mode sync
#include <sys/resource.h>  // getrusage: the peak RSS in the summary

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <strata/models/char_transformer.hpp>
#include <strata/runtime/fail_job.hpp>
#include <strata/strata.hpp>

#include "../common/checkpoints.hpp"
#include "../common/run_flags.hpp"
#include "../common/straggler_flags.hpp"
#include "../common/strategy_flags.hpp"
#include "../common/timeline.hpp"

namespace {

struct Options : trainer::StrategyFlags, trainer::RunFlags, trainer::StragglerFlags {
  std::int64_t context = 64, width = 128, heads = 4, layers = 4;
  double clip = 1.0;
  std::int64_t eval_every = 250, eval_windows = 256, sample_chars = 300;
  std::string timeline_path;
  // The gradients are clipped after aggregation, on the workers: a parameter server then
  // only stores (--update-on servers needs --clip 0).
  Options() {
    update_on = "workers";
    steps = 1000;
    batch = 32;
    lr = 1e-3;
    data_dir = strata::data::default_fortunes_dir();
  }
};

int parse_options(int argc, char** argv, Options& o) {
  CLI::App app{"Trains the reference character-level Transformer on Debian's fortunes under any strategy; prints the "
               "validation loss (nats per character) as it goes, samples text at the end, then one JSON line.",
               "char_transformer"};
  trainer::add_run_flags(app, o, {.steps = "optimizer steps in all",
                                  .batch = "sequences",
                                  .lr = "AdamW's learning rate, cosine-decayed after 100 warm-up steps",
                                  .data = "the fortunes directory"});
  app.add_option("--context", o.context, "characters per sequence (the model's longest)")->capture_default_str();
  app.add_option("--width", o.width, "the model's width: each token's vector, split over the heads")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads per layer (they divide --width)")->capture_default_str();
  app.add_option("--layers", o.layers, "Transformer blocks")->capture_default_str();
  app.add_option("--clip", o.clip, "global gradient norm (0: none)")->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "steps between validation losses")->capture_default_str();
  app.add_option("--eval-windows", o.eval_windows, "held-out sequences each validation reads")->capture_default_str();
  app.add_option("--sample", o.sample_chars, "characters to sample at the end")->capture_default_str();
  app.add_option("--timeline", o.timeline_path, "a Chrome trace of every rank (https://ui.perfetto.dev): each step's "
                 "forward, backward and update, and the collectives");
  trainer::add_straggler_flags(app, o);
  trainer::add_strategy_flags(app, o, "cpu, or cuda:N (char_transformer_cuda; one_device, or central_storage with replica r on cuda:N+r)",
                              /*sharded=*/true);
  try {
    app.parse(argc, argv);
    for (auto [flag, v] : {std::pair{"--steps", o.steps}, std::pair{"--context", o.context},
                           std::pair{"--width", o.width}, std::pair{"--heads", o.heads}, std::pair{"--layers", o.layers},
                           std::pair{"--eval-every", o.eval_every}, std::pair{"--eval-windows", o.eval_windows}})
      if (v < 1) throw CLI::ValidationError(flag, "must be at least 1, got " + std::to_string(v));
    if (o.width % o.heads != 0) throw CLI::ValidationError("--heads", "must divide --width");
    trainer::check_strategy_flags(app, o);
    trainer::check_run_flags(app, o, o.strategy == "parameter_server" && o.mode == "async");
    if (o.update_on == "servers" && o.clip > 0)
      throw CLI::ValidationError("--update-on", "servers needs --clip 0: clipping runs on the workers, before the update");
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return -1;
}

/// The mean next-character loss over `windows` (nats per character), without gradients.
double validation_loss(strata::models::CharTransformer& model, const strata::data::TensorDataset& windows) {
  strata::NoGradGuard no_grad;
  const std::int64_t V = model.shape().vocab;
  const strata::Device device = model.parameters().front().device();
  double total = 0;
  std::int64_t count = 0;
  for (const auto& b : strata::data::Pipeline(windows).batch(64)) {
    const strata::Tensor logits = strata::reshape(model(b.x.to(device)), {-1, V});
    const strata::Tensor labels = strata::reshape(b.y, {-1}).to(device);
    total += strata::nn::cross_entropy(logits, labels, strata::nn::Reduction::sum).item();
    count += b.y.numel();
  }
  return total / static_cast<double>(count);
}

/// `n` characters drawn one at a time from the model's distribution, after `prompt`.
std::string sample(strata::models::CharTransformer& model, const strata::data::CharCorpus& corpus,
                   std::vector<std::int64_t> prompt, std::int64_t n, strata::Generator& gen) {
  strata::NoGradGuard no_grad;
  const std::int64_t V = model.shape().vocab, C = model.shape().context;
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto from = prompt.size() > static_cast<std::size_t>(C) ? prompt.end() - C : prompt.begin();
    const std::vector<std::int64_t> window(from, prompt.end());
    const auto T = static_cast<std::int64_t>(window.size());
    const strata::Tensor x = strata::from_vector<std::int64_t>({1, T}, window).to(model.parameters().front().device());
    const strata::Tensor probs = strata::softmax(model(x)).to(strata::Device::cpu());
    const auto p = strata::to_dtype(probs, strata::DType::f64).to_vector<double>();
    double u = gen.uniform(0.0, 1.0), acc = 0;
    std::int64_t next = V - 1;
    for (std::int64_t v = 0; v < V; ++v)
      if ((acc += p[static_cast<std::size_t>((T - 1) * V + v)]) >= u) {
        next = v;
        break;
      }
    prompt.push_back(next);
    out.push_back(next);
  }
  return corpus.decode(out);
}

template <strata::Strategy S>
void train(S& strategy, const Options& o) {
  using Clock = std::chrono::steady_clock;
  const strata::data::CharCorpus corpus(strata::data::fortunes_text(o.data_dir));
  const auto split = static_cast<std::ptrdiff_t>(corpus.tokens.size() * 9 / 10);  // a fixed held-out tail
  const std::span<const std::int64_t> all(corpus.tokens);
  const auto train_windows = strata::data::next_token_windows(all.first(static_cast<std::size_t>(split)), o.context);
  const auto held_out = strata::data::next_token_windows(all.subspan(static_cast<std::size_t>(split)), o.context);
  const auto val = strata::data::TensorDataset(
      strata::data::slice_rows(held_out.x, 0, std::min(o.eval_windows, held_out.size())),
      strata::data::slice_rows(held_out.y, 0, std::min(o.eval_windows, held_out.size())));

  strata::manual_seed(o.seed);
  const strata::models::TransformerShape shape{corpus.vocabulary_size(), o.context, o.width, o.heads, o.layers};
  auto model = strategy.scope([&] { return strata::models::CharTransformer(shape); });
  auto opt = strategy.scope([&] { return strata::optim::AdamW(model.parameters(), o.lr, {.beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1}); });
  opt.set_schedule(strata::optim::Schedule::cosine(o.lr, o.steps, std::min<std::int64_t>(100, o.steps / 10), o.lr / 10));
  if (o.clip > 0) opt.clip_by_global_norm(o.clip);  // of the gradients divided by the loss scale, if any
  if (strata::precision::needs_loss_scale(strata::precision::current())) opt.set_loss_scale();  // fp16
  auto pipeline = strata::data::Pipeline(train_windows).shuffle(o.seed).batch(trainer::global_batch_of(o, strategy.num_replicas_in_sync()));
  const bool report = strategy.is_chief() && !o.quiet;
  if (report)
    std::printf("%zu characters (%lld distinct), %lld training and %lld held-out sequences of %lld; %s\n",
                corpus.tokens.size(), static_cast<long long>(corpus.vocabulary_size()),
                static_cast<long long>(train_windows.size()), static_cast<long long>(held_out.size()),
                static_cast<long long>(o.context), S::name);

  // Checkpoints: resume from the newest complete one, then save every N steps and at the end.
  trainer::Checkpoints checkpoints(strategy, model, opt, o);
  strata::checkpoint::TrainingPosition pos = checkpoints.resume();

  // Whole epochs, then the first batches of one more: every rank runs the same epochs (a
  // parameter server's range serves its workers until they have finished each one).
  const std::int64_t per_epoch = pipeline.num_batches();
  std::int64_t step = pos.step, trained = 0;  // the job's steps, and this run's
  double loss = NAN, val_loss = NAN;
  std::int64_t tokens = 0;
  std::vector<double> step_ms;  // each training step's time, for the median
  step_ms.reserve(static_cast<std::size_t>(o.steps));
  trainer::start_timeline(o.timeline_path);
  strata::StragglerScores stragglers = trainer::make_straggler_scores(o);
  const auto start = Clock::now();
  for (std::int64_t epoch = pos.epoch, done = pos.epoch * per_epoch; done < o.steps; ++epoch) {
    const std::int64_t now = std::min(per_epoch, o.steps - done);
    strata::data::Pipeline part = pipeline.take(now);
    part.set_position(epoch, epoch == pos.epoch ? pos.batch : 0);
    for (auto& batch : strategy.distribute(part)) {
      const auto t0 = Clock::now();
      auto losses = strategy.run(
          [&](strata::ReplicaContext& ctx, const strata::data::Batch& b) {
            strata::Tensor l;
            {
              strata::observe::ScopedEvent ev("forward", "compute");
              const strata::Tensor logits = strata::reshape(model(b.x), {-1, shape.vocab});
              const strata::Tensor per_char = strata::nn::cross_entropy(logits, strata::reshape(b.y, {-1}),
                                                                        strata::nn::Reduction::none);
              l = strata::compute_average_loss(per_char, b.global_size * o.context);
            }
            strata::Gradients grads;
            {
              strata::observe::ScopedEvent ev("backward", "compute");
              grads = strata::grad(opt.scale_loss(l), model.parameters());
            }
            strata::observe::ScopedEvent ev("update", "compute");
            opt.apply_gradients(ctx, std::move(grads));
            return l;
          },
          batch);
      loss = strategy.reduce(strata::ReduceOp::Sum, losses).item();
      if (const strata::observe::StragglerReport* w = stragglers.step(strategy); w && w->markedly_slow && report)
        std::printf("step %lld: %s\n", static_cast<long long>(step + 1), w->sentence().c_str());
      step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      tokens += batch.global_size * o.context;
      ++step, ++trained;
      pos = pos.after(batch, per_epoch);
      checkpoints.after_step(pos);
      if (step % o.eval_every == 0 || step == o.steps) {
        strata::models::CharTransformer& held = model;  // this process's copy
        val_loss = validation_loss(held, val);
        if (report)
          std::printf("step %lld  epoch %lld  train %.4f  validation %.4f nats/char\n", static_cast<long long>(step),
                      static_cast<long long>(epoch), loss, val_loss);
      }
      stragglers.restart();  // a checkpoint or an evaluation is no step's compute
    }
    done += now;
  }
  checkpoints.finish(pos);
  trainer::write_timeline(strategy, o.timeline_path);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // The median step after the first tenth (at most 10 steps of warm-up).
  const std::size_t warmup = std::min<std::size_t>(10, step_ms.size() / 10);
  std::sort(step_ms.begin() + static_cast<std::ptrdiff_t>(warmup), step_ms.end());
  const double median_ms = step_ms.empty() ? 0.0 : step_ms[warmup + (step_ms.size() - warmup) / 2];
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::int64_t parameter_count = 0;
  for (const strata::Tensor& p : model.parameters()) parameter_count += p.numel();
  // The optimizer state this process holds: its shard's alone under --strategy sharded.
  double state_bytes = 0;
  const strata::optim::Optimizer& held_opt = strata::detail::local_copy(opt, 0);
  for (const auto& [name, t] : held_opt.state()) state_bytes += static_cast<double>(t.nbytes());
  // Where the chief's model alone runs below, its parameters whole first, with every rank
  // (under --shard-stage 3 its units' blocks are gathered; under any other strategy nothing
  // happens). val_loss is every rank's.
  std::optional<strata::GatheredParameters> whole;
  if (o.sample_chars > 0 || std::isnan(val_loss)) whole.emplace(strata::gather_parameters(strategy, model.parameters()));
  if (strategy.is_chief()) {
    strata::models::CharTransformer& held = model;
    if (std::isnan(val_loss)) val_loss = validation_loss(held, val);  // a run that trained no step (resumed at its end)
    strata::Generator gen(o.seed + 1);
    const std::string text = sample(held, corpus, {corpus.tokens[0]}, o.sample_chars, gen);
    if (!o.quiet) std::printf("--- sampled ---\n%s\n---------------\n", text.c_str());
    // "steps": this run's (a resumed run's own); the train loss null where it trained none.
    const std::string train_loss = std::isnan(loss) ? "null" : std::to_string(loss);
    // "peak_tensor_mib": the most host memory this process's tensors held at once (the
    // allocator's own count: parameters, gradients, optimizer state and activations).
    std::printf("{\"model\":\"char_transformer\",\"strategy\":\"%s\",\"replicas\":%d,\"steps\":%lld,\"train_loss\":%s,"
                "\"validation_loss\":%.5f,\"chars_per_s\":%.1f,\"median_step_ms\":%.4f,\"peak_rss_mib\":%.1f,"
                "\"optimizer_state_mib\":%.2f,\"peak_tensor_mib\":%.2f,\"parameters\":%lld,\"stragglers\":%s}\n",
                S::name, strategy.num_replicas_in_sync(), static_cast<long long>(trained), train_loss.c_str(), val_loss,
                static_cast<double>(tokens) / seconds, median_ms, static_cast<double>(usage.ru_maxrss) / 1024.0,
                state_bytes / (1024.0 * 1024.0),
                static_cast<double>(strata::CachingHostAllocator::instance().stats().peak_bytes_in_use) / (1024.0 * 1024.0),
                static_cast<long long>(parameter_count), trainer::straggler_json(stragglers).dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  if (const int status = parse_options(argc, argv, o); status >= 0) return status;
  const strata::precision::Scope precision(strata::precision::from_name(o.precision));  // every replica's
  trainer::with_strategy</*kSharded=*/true>(o, [&](auto& strategy) { train(strategy, o); });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "char_transformer: %s\n", e.what());
  strata::runtime::fail_job(e.what());
  return 1;
}
