// strata-info: what this build of strata has and what this machine and launch offer — the
// version, the collective policies and the versions of their libraries, the host and its
// network interfaces, this process's place in the job, and the environment variables strata
// reads. `strata-info --check`, started the way the job will be (mpirun, strata-run), runs a
// small all-reduce on every policy across the launched ranks and reports each rank's result
// or error by name: a pre-flight check of the interface, the ranks and the rendezvous.
// `strata-info --diagnose DIR` reads the ranks' flight-recorder files in DIR and says which
// collective a rank never entered, or which ranks called different ones (docs/faults.md).
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/collective/flight_diagnosis.hpp>
#include <strata/collective/in_process.hpp>
#if STRATA_HAS_CUDA
#include <cuda_runtime_api.h>

#include <strata/kernels/cuda/runtime.hpp>
#endif
#if STRATA_HAS_NCCL
#include <strata/collective/nccl.hpp>
#endif
#include <strata/kernels/cpu/blas_core.hpp>
#include <strata/kernels/cpu/gemm.hpp>  // gemm_kernel
#include <strata/runtime/process.hpp>
#include <strata/version.hpp>
#if STRATA_HAS_MPI
#include <strata/collective/mpi.hpp>
#endif
#if STRATA_HAS_GLOO
#include <gloo/config.h>

#include <strata/collective/gloo.hpp>
#endif
#if STRATA_HAS_BLAS
#include <cblas.h>
#endif
#if STRATA_HAS_ZLIB
#include <zlib.h>
#endif
#if STRATA_HAS_CRYPTO
#include <openssl/crypto.h>
#endif

namespace {

[[maybe_unused]] std::string first_line(std::string s) {
  const auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ',' || s.back() == ' ')) s.pop_back();
  return s;
}

/// The value of `key` in a "key : value" file such as /proc/cpuinfo, or "".
std::string proc_field(const char* path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return {};
}

#if STRATA_HAS_CUDA
/// The CUDA runtime this program loaded, the devices it sees, and which pairs reach each
/// other directly (peer access: NVLink or PCIe P2P).
void report_cuda() {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const int n = strata::kernels::cuda::device_count();
  std::printf("  cuda        yes (runtime %d.%d, toolkit %s at build time; driver %s)\n", runtime / 1000,
              runtime % 1000 / 10, STRATA_INFO_CUDA,
              driver ? (std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10)).c_str() : "none");
  if (n == 0) {
    std::printf("    no device: %s\n", strata::kernels::cuda::no_device_reason().c_str());
    return;
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  std::printf("    %d device(s)%s%s\n", n, visible ? ", CUDA_VISIBLE_DEVICES=" : "", visible ? visible : "");
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    char bus[32] = {};
    cudaDeviceGetPCIBusId(bus, sizeof bus, d);
    std::string peers;
    for (int e = 0; e < n; ++e) {
      int can = 0;
      if (e != d && cudaDeviceCanAccessPeer(&can, d, e) == cudaSuccess && can) peers += " " + std::to_string(e);
    }
    std::printf("    cuda:%d  %s, sm_%d%d, %.1f GiB, %d SMs, PCI %s; peer access to:%s\n", d, prop.name, prop.major,
                prop.minor, static_cast<double>(prop.totalGlobalMem) / (1 << 30), prop.multiProcessorCount, bus,
                peers.empty() ? " none" : peers.c_str());
  }
}
#endif

void report_build() {
#if defined(__clang__)
  const char* compiler = "clang ";
#else
  const char* compiler = "g++ ";
#endif
  std::printf("strata %s (compiled by %s%s, C++ %ld)\n", strata::version_string, compiler, __VERSION__, __cplusplus);
  std::printf("\ncollective policies\n");
  std::printf("  in_process  yes (threads of one process)\n");
#if STRATA_HAS_MPI
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(lib, &len);  // callable before MPI_Init
  std::printf("  mpi         yes (%s; MPI %d.%d)\n", first_line(lib).c_str(), MPI_VERSION, MPI_SUBVERSION);
#else
  std::printf("  mpi         no (configure with -Dmpi=enabled; Debian: libopenmpi-dev openmpi-bin)\n");
#endif
#if STRATA_HAS_GLOO
  std::printf("  gloo        yes (Gloo %d.%d.%d, TCP)\n", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
#else
  std::printf("  gloo        no (configure with -Dgloo=enabled; Debian: libgloo-dev)\n");
#endif
#if STRATA_HAS_NCCL
  int nccl = 0;
  ncclGetVersion(&nccl);
  std::printf("  nccl        yes (NCCL %d.%d.%d loaded; %s at build time)\n", nccl / 10000, nccl / 100 % 100,
              nccl % 100, STRATA_INFO_NCCL);
#else
  std::printf("  nccl        no (configure with -Dnccl=enabled; needs CUDA)\n");
#endif
  std::printf("\ndevices and libraries\n");
#if STRATA_HAS_CUDA
  report_cuda();
#else
  std::printf("  cuda        no (configure with -Dcuda=enabled; needs nvcc)\n");
#endif
#ifdef STRATA_INFO_CUDNN
  std::printf("  cudnn       yes (cuDNN %s; convolutions in nvcc-built programs)\n", STRATA_INFO_CUDNN);
#else
  std::printf("  cudnn       no (configure with -Dcudnn=enabled; needs CUDA)\n");
#endif
#if STRATA_HAS_BLAS
  std::printf("  blas        yes (%s, %d threads)\n", first_line(openblas_get_config()).c_str(), openblas_get_num_threads());
  {
    const strata::kernels::cpu::BlasCore& core = strata::kernels::cpu::blas_core();
    std::printf("  blas kernels %s (%s)\n", core.used.c_str(), core.reason.c_str());
  }
#else
  std::printf("  blas        no (the built-in blocked GEMM; configure with -Dblas=enabled for OpenBLAS)\n");
#endif
  {
    const strata::kernels::cpu::GemmKernel& gemm = strata::kernels::cpu::gemm_kernel();
    std::printf("  gemm kernel %s (%s)\n", gemm.name.c_str(), gemm.reason.c_str());
  }
#if STRATA_HAS_ZLIB
  std::printf("  zlib        yes (%s)\n", ZLIB_VERSION);
#else
  std::printf("  zlib        no (gzip-compressed IDX files cannot be read; -Dzlib=enabled)\n");
#endif
#if STRATA_HAS_CRYPTO
  std::printf("  libcrypto   yes (%s)\n", ::OpenSSL_version(OPENSSL_VERSION));
#else
  std::printf("  libcrypto   no (no authenticated rendezvous: the TCP store, Gloo and strata-run refuse; -Dcrypto=enabled)\n");
#endif
}

void report_host() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  int numa = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec))
    numa += e.path().filename().string().rfind("node", 0) == 0;
  std::printf("\nhost %s\n", host);
  std::printf("  cpu         %s; %u hardware threads; %d NUMA node(s)\n", proc_field("/proc/cpuinfo", "model name").c_str(),
              std::thread::hardware_concurrency(), numa);
  std::printf("  memory      %s\n", proc_field("/proc/meminfo", "MemTotal").c_str());
  std::printf("  interfaces  (choose one with STRATA_IFNAME)\n");
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next)
      if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET) {
        char addr[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, addr, sizeof addr);
        std::printf("    %-10s %s\n", a->ifa_name, addr);
      }
    ::freeifaddrs(list);
  }
}

void report_launch(const strata::runtime::ProcessInfo& p) {
  std::printf("\nthis process\n");
  std::printf("  launcher    %s; rank %d of %d, local rank %d of %d\n", p.launcher.c_str(), p.rank, p.world_size,
              p.local_rank, p.local_size);
  std::printf("  rendezvous  %s\n", p.rendezvous_dir.empty()
                                        ? ("TCP store " + p.master_addr + ":" + std::to_string(p.master_port)).c_str()
                                        : ("file store in " + p.rendezvous_dir).c_str());
  std::printf("\nenvironment\n");
  static const char* vars[] = {"STRATA_COLLECTIVE_TIMEOUT", "STRATA_COLLECTIVE_DEBUG", "STRATA_IFNAME",
                               "STRATA_MASTER_ADDR",        "STRATA_MASTER_PORT",      "STRATA_RENDEZVOUS_DIR",
                               "STRATA_RANK",               "STRATA_WORLD_SIZE",       "STRATA_LOCAL_RANK",
                               "STRATA_LOCAL_SIZE",         "STRATA_NUM_SERVERS",      "STRATA_SERVER_RANKS",
                               "STRATA_FASHION_MNIST_DIR",  "STRATA_SHM",              "STRATA_BUCKET_BYTES",
                               "STRATA_COMM_THREAD",        "STRATA_SPLIT_UPDATE",     "STRATA_SPIN_US",
                               "STRATA_BLAS_CORE",          "STRATA_GEMM",             "OMP_NUM_THREADS",
                               "OPENBLAS_NUM_THREADS",      "OPENBLAS_CORETYPE",       "OMPI_COMM_WORLD_RANK",
                               "OMPI_COMM_WORLD_SIZE"};
  for (const char* v : vars) {
    const char* value = std::getenv(v);
    std::printf("  %-26s %s\n", v, value ? value : "(unset)");
  }
}

// ------------------------------------------------------------------ --check

#if STRATA_HAS_NCCL
/// The NCCL all-reduce of rank+1 on this process's GPU (its local rank's), bootstrapped
/// through `boot`.
template <class B>
bool check_nccl(B& boot, const strata::runtime::ProcessInfo& p) {
  const int n = strata::kernels::cuda::device_count();
  if (n == 0) {
    std::printf("rank %d: %-10s skipped: no CUDA device (%s)\n", p.rank, "nccl",
                strata::kernels::cuda::no_device_reason().c_str());
    return true;
  }
  const int device = p.local_rank % n;
  strata::kernels::cuda::DeviceGuard on(device);
  strata::collective::Nccl nccl(boot, device);
  double* x = nullptr;
  STRATA_CUDA_CHECK(cudaMalloc(&x, sizeof(double)));
  const double mine = p.rank + 1;
  STRATA_CUDA_CHECK(cudaMemcpy(x, &mine, sizeof mine, cudaMemcpyHostToDevice));
  nccl.allreduce(std::span(x, 1), strata::ReduceOp::Sum);
  double sum = 0;
  STRATA_CUDA_CHECK(cudaMemcpy(&sum, x, sizeof sum, cudaMemcpyDeviceToHost));
  (void)cudaFree(x);
  const double want = boot.size() * (boot.size() + 1) / 2.0;
  std::printf("rank %d: %-10s %s: all-reduce over %d GPU(s) (this rank on cuda:%d) gave %g (expected %g)\n", p.rank,
              "nccl", sum == want ? "ok" : "WRONG", boot.size(), device, sum, want);
  std::fflush(stdout);
  return sum == want;
}
#endif

/// One all-reduce of rank+1 over `comm`: the sum must be n(n+1)/2.
template <class C>
bool check_allreduce(C& comm, const char* policy, int rank) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> v{static_cast<double>(comm.rank() + 1)};
  comm.allreduce(std::span(v), strata::ReduceOp::Sum);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const int n = comm.size();
  const bool ok = v[0] == n * (n + 1) / 2.0;
  std::printf("rank %d: %-10s %s: all-reduce over %d rank(s) gave %g (expected %g) in %.2f ms\n", rank, policy,
              ok ? "ok" : "WRONG", n, v[0], n * (n + 1) / 2.0, ms);
  std::fflush(stdout);
  return ok;
}

template <class F>
bool attempt(const char* policy, int rank, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    std::printf("rank %d: %-10s FAILED: %s\n", rank, policy, e.what());
    std::fflush(stdout);
    return false;
  }
}

int run_check(const strata::runtime::ProcessInfo& p) {
  // NCCL is checked once, bootstrapped through the job's Gloo group (else its MPI one).
  [[maybe_unused]] auto nccl_through = [&](auto& boot) {
#if STRATA_HAS_NCCL
    return attempt("nccl", p.rank, [&] { return check_nccl(boot, p); });
#else
    (void)boot;
    return true;
#endif
  };
  bool ok = attempt("in_process", p.rank, [&] {
    bool all = true;
    strata::collective::InProcess::launch(2, [&](strata::collective::InProcess& c) {
      std::vector<double> v{static_cast<double>(c.rank() + 1)};
      c.allreduce(std::span(v), strata::ReduceOp::Sum);
      if (v[0] != 3.0) all = false;
    });
    std::printf("rank %d: %-10s %s: all-reduce over 2 threads\n", p.rank, "in_process", all ? "ok" : "WRONG");
    return all;
  });
#if STRATA_HAS_MPI
  if (p.launcher != "env")  // under strata-run there is no MPI job to join
    ok = attempt("mpi", p.rank, [&] {
           strata::collective::Mpi comm;
           return check_allreduce(comm, "mpi", p.rank);
         }) && ok;
#endif
#if STRATA_HAS_GLOO
  ok = attempt("gloo", p.rank, [&] {
         strata::collective::Gloo comm(p, "strata-info-check", strata::collective::Options::from_env());
         return check_allreduce(comm, "gloo", p.rank) && nccl_through(comm);
       }) && ok;
#elif STRATA_HAS_MPI
  if (p.launcher != "env")
    ok = attempt("nccl", p.rank, [&] {
           strata::collective::Mpi comm;
           return nccl_through(comm);
         }) && ok;
#endif
  std::printf("rank %d: check %s\n", p.rank, ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string arg = argc > 1 ? argv[1] : "";
  if (arg == "--diagnose" && argc == 3) {
    try {
      std::fputs(strata::collective::diagnose(strata::collective::read_flight_dumps(argv[2])).c_str(), stdout);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata-info: %s\n", e.what());
      return 1;
    }
  }
  if (argc > 2 || (!arg.empty() && arg != "--check")) {
    std::fprintf(stderr, "usage: strata-info [--check | --diagnose DIR]   (--check under mpirun or strata-run checks "
                 "every rank; --diagnose reads the ranks' flight-recorder files in DIR)\n");
    return 2;
  }
  try {
    const strata::runtime::ProcessInfo p = strata::runtime::detect_process();
    if (arg == "--check") return run_check(p);
    if (p.rank != 0) return 0;  // one report per job
    report_build();
    report_host();
    report_launch(p);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-info: %s\n", e.what());
    return 1;
  }
}
