// strata::collective::Nccl's all-reduce against raw ncclAllReduce on the same GPUs: for each
// size, calls of each kind alternate (A B C A B C ...) and each kind's median wall time per
// call is printed with the ratios raw/strata (1.0: strata costs what NCCL costs). Every call
// blocks until the result is on the device:
//   raw          ncclAllReduce, then cudaStreamSynchronize, on a communicator of the default
//                (blocking) configuration;
//   raw_compute  the same on the compute stream (where strata's blocking call runs);
//   raw_nb       the same as raw on a non-blocking communicator (ncclConfig_t::blocking = 0,
//                as strata's);
//   raw_ordered  raw, first ordered after the compute stream (an event recorded there,
//                waited on by the NCCL stream): what strata's blocking call promises;
//   strata       Nccl::allreduce_raw.
// The three raw variants between them show where a difference between raw and strata comes
// from (the stream, the communicator's configuration, or strata's own work).
//
// First, the host cost of each call a blocking strata call makes besides NCCL's own (median
// of 2000 calls each): the host-or-device check of the buffer, the communicator's error poll,
// a query of an idle stream, and a clock read.
//
// One process drives every visible GPU (one thread per GPU, bootstrapped in process), so
// the world size is the number of GPUs; on one GPU NCCL's all-reduce is a copy (out of
// place) or nothing (in place), and what is measured is the cost of the call itself.
//
//   bench_nccl [--min-bytes 4096] [--max-bytes 268435456] [--iters 40] [--inplace]
#include <nccl.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/in_process.hpp>
#include <strata/collective/nccl.hpp>

namespace {

void nccl_ok(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess) {
    std::fprintf(stderr, "bench_nccl: %s: %s\n", what, ncclGetErrorString(rc));
    std::exit(1);
  }
}

void cuda_ok(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    std::fprintf(stderr, "bench_nccl: %s: %s\n", what, cudaGetErrorString(rc));
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t min_bytes = 4096, max_bytes = std::size_t{256} << 20;
  int iters = 40;
  bool inplace = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--inplace") inplace = true;
    else if (i + 1 >= argc) throw strata::invalid_argument(a + " needs a value");
    else if (a == "--min-bytes") min_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--max-bytes") max_bytes = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--iters") iters = std::atoi(argv[++i]);
    else throw strata::invalid_argument("unknown flag " + a);
  }
  const int gpus = strata::kernels::cuda::device_count();
  if (gpus < 1) throw strata::invalid_argument("no CUDA device");

  std::vector<int> devs(static_cast<std::size_t>(gpus));
  for (int d = 0; d < gpus; ++d) devs[static_cast<std::size_t>(d)] = d;
  std::vector<ncclComm_t> raw(static_cast<std::size_t>(gpus));
  nccl_ok(ncclCommInitAll(raw.data(), gpus, devs.data()), "ncclCommInitAll");
  // The same communicators, non-blocking (as strata makes its own).
  std::vector<ncclComm_t> nonblocking(static_cast<std::size_t>(gpus));
  {
    ncclUniqueId id;
    nccl_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_ok(ncclGroupStart(), "ncclGroupStart");
    for (int d = 0; d < gpus; ++d) {
      cuda_ok(cudaSetDevice(d), "cudaSetDevice");
      const ncclResult_t rc = ncclCommInitRankConfig(&nonblocking[static_cast<std::size_t>(d)], gpus, id, d, &config);
      if (rc != ncclInProgress) nccl_ok(rc, "ncclCommInitRankConfig");
    }
    const ncclResult_t rc = ncclGroupEnd();
    if (rc != ncclInProgress) nccl_ok(rc, "ncclGroupEnd");
    for (ncclComm_t c : nonblocking) {
      ncclResult_t st = ncclInProgress;
      while (st == ncclInProgress) nccl_ok(ncclCommGetAsyncError(c, &st), "ncclCommGetAsyncError");
      nccl_ok(st, "non-blocking communicator set-up");
    }
  }
  auto boot = strata::collective::InProcess::make_group(gpus);
  std::barrier sync(gpus);

  std::printf("# world size %d (one thread per GPU), %s, float32 sum, %d calls per side per size\n", gpus,
              inplace ? "in place" : "out of place", iters);
  std::printf("%12s %10s %14s %9s %14s %10s %11s %19s\n", "bytes", "raw_us", "raw_compute_us", "raw_nb_us",
              "raw_ordered_us", "strata_us", "raw/strata", "raw_ordered/strata");
  std::vector<std::vector<double>> raw_us(64), compute_us(64), nb_us(64), ordered_us(64), strata_us(64);
  std::vector<std::thread> threads;
  for (int r = 0; r < gpus; ++r) {
    threads.emplace_back([&, r] {
      strata::collective::Nccl nccl(boot[static_cast<std::size_t>(r)], r);
      cuda_ok(cudaSetDevice(r), "cudaSetDevice");
      cudaStream_t s;
      cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      cudaEvent_t produced;
      cuda_ok(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming), "cudaEventCreate");
      cudaStream_t compute = strata::kernels::cuda::compute_stream(r);
      float *in = nullptr, *out = nullptr;
      cuda_ok(cudaMalloc(&in, max_bytes), "cudaMalloc");
      cuda_ok(cudaMalloc(&out, max_bytes), "cudaMalloc");
      cuda_ok(cudaMemset(in, 0x3f, max_bytes), "cudaMemset");  // 0x3f3f3f3f: 0.747..., not zeros
      cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (r == 0) {
        auto cost = [](auto&& call) {
          std::vector<double> us;
          for (int i = 0; i < 2000; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            call();
            us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
          }
          return median(us);
        };
        ncclComm_t c0 = raw[0];
        std::printf("# host cost per call, us: cudaPointerGetAttributes %.3f, ncclCommGetAsyncError %.3f, "
                    "cudaStreamQuery (idle) %.3f, steady_clock::now %.3f\n",
                    cost([&] { (void)strata::collective::detail::is_device_memory(in); }),
                    cost([&] { ncclResult_t st; (void)ncclCommGetAsyncError(c0, &st); }),
                    cost([&] { (void)cudaStreamQuery(compute); }),
                    cost([] { (void)std::chrono::steady_clock::now(); }));
      }
      int k = 0;
      for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4, ++k) {
        const std::size_t n = bytes / sizeof(float);
        float* dst = inplace ? in : out;
        using Clock = std::chrono::steady_clock;
        for (int it = -5; it < iters; ++it) {  // 5 warm-up calls of each side
          sync.arrive_and_wait();
          auto t0 = Clock::now();
          nccl_ok(ncclAllReduce(in, dst, n, ncclFloat32, ncclSum, raw[static_cast<std::size_t>(r)], s), "ncclAllReduce");
          cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          const double a = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          sync.arrive_and_wait();
          t0 = Clock::now();
          cuda_ok(cudaEventRecord(produced, compute), "cudaEventRecord");
          cuda_ok(cudaStreamWaitEvent(s, produced, 0), "cudaStreamWaitEvent");
          nccl_ok(ncclAllReduce(in, dst, n, ncclFloat32, ncclSum, raw[static_cast<std::size_t>(r)], s), "ncclAllReduce");
          cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          const double c = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          sync.arrive_and_wait();
          t0 = Clock::now();
          nccl_ok(ncclAllReduce(in, dst, n, ncclFloat32, ncclSum, raw[static_cast<std::size_t>(r)], compute), "ncclAllReduce");
          cuda_ok(cudaStreamSynchronize(compute), "cudaStreamSynchronize");
          const double d = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          sync.arrive_and_wait();
          t0 = Clock::now();
          {
            ncclComm_t nb = nonblocking[static_cast<std::size_t>(r)];
            const ncclResult_t rc = ncclAllReduce(in, dst, n, ncclFloat32, ncclSum, nb, s);
            if (rc == ncclInProgress) {
              ncclResult_t st = ncclInProgress;
              while (st == ncclInProgress) nccl_ok(ncclCommGetAsyncError(nb, &st), "ncclCommGetAsyncError");
              nccl_ok(st, "ncclAllReduce (non-blocking)");
            } else {
              nccl_ok(rc, "ncclAllReduce (non-blocking)");
            }
          }
          cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
          const double e = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          sync.arrive_and_wait();
          t0 = Clock::now();
          nccl.allreduce_raw(in, dst, n, strata::DType::f32, strata::ReduceOp::Sum);
          const double b = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
          if (r == 0 && it >= 0) {
            const auto i = static_cast<std::size_t>(k);
            raw_us[i].push_back(a);
            ordered_us[i].push_back(c);
            compute_us[i].push_back(d);
            nb_us[i].push_back(e);
            strata_us[i].push_back(b);
          }
        }
      }
      cuda_ok(cudaFree(in), "cudaFree");
      cuda_ok(cudaFree(out), "cudaFree");
      cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
      cuda_ok(cudaEventDestroy(produced), "cudaEventDestroy");
    });
  }
  for (auto& t : threads) t.join();
  int k = 0;
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4, ++k) {
    const auto i = static_cast<std::size_t>(k);
    const double a = median(raw_us[i]), c = median(ordered_us[i]), b = median(strata_us[i]);
    std::printf("%12zu %10.2f %14.2f %9.2f %14.2f %10.2f %11.3f %19.3f\n", bytes, a, median(compute_us[i]),
                median(nb_us[i]), c, b, b > 0 ? a / b : 0.0, b > 0 ? c / b : 0.0);
  }
  for (auto c : raw) ncclCommDestroy(c);
  for (auto c : nonblocking) ncclCommAbort(c);  // (a non-blocking destroy would need polling)
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_nccl: %s\n", e.what());
  return 1;
}
