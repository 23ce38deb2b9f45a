// The "64 KiB stall" of Gloo's classic ring allreduce, and strata::Gloo beside it (strata-run
// -np 2). For each size, `--calls` back-to-back allreduces of: Gloo's classic AllreduceRing;
// the same after its sockets' SO_SNDBUF is raised to 4 MiB (the cause: Gloo sizes the send
// buffer to one message, the unacknowledged previous message fills it, and the receiver
// delays the ACK by the 40 ms delayed-ACK timer — docs/collectives.md); and strata. Counts
// the calls over 20 ms on the slowest rank. One JSON line per size.
//
//   strata-run -np 2 bench_gloo_stall [--calls 2000]
#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <gloo/allreduce_ring.h>

#include <strata/collective/gloo.hpp>

namespace {
/// This process's socket descriptors.
std::vector<int> sockets() {
  std::vector<int> out;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (dirent* e = ::readdir(d)) {
      const int fd = std::atoi(e->d_name);
      struct stat st {};
      if (fd > 2 && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) out.push_back(fd);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
void raise_send_buffers(const std::vector<int>& fds) {
  for (int fd : fds) {
    int v = 4 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  }
}
}  // namespace

int main(int argc, char** argv) {
  int calls = 2000;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--calls") calls = std::atoi(argv[i + 1]);
  // Separate communicators: raising one's buffers must not help the others.
  strata::collective::Gloo classic("stall-classic"), ours("stall-strata");
  const std::vector<int> before = sockets();
  strata::collective::Gloo tuned("stall-tuned");
  std::vector<int> tuned_fds;  // the sockets the "tuned" communicator opened
  for (int fd : sockets())
    if (!std::binary_search(before.begin(), before.end(), fd)) tuned_fds.push_back(fd);
  STRATA_CHECK(ours.size() > 1, "bench_gloo_stall needs at least 2 ranks (strata-run -np 2)");
  using clock = std::chrono::steady_clock;
  auto slowest = [&](std::vector<double> v) {
    ours.allreduce(std::span(v), strata::ReduceOp::Max);
    return v;
  };
  for (std::size_t bytes : {32768u, 49152u, 65536u, 98304u, 131072u}) {
    const std::size_t count = bytes / 4;
    std::vector<float> a(count, 1.0f), b(count, 1.0f), c(count, 1.0f);
    std::vector<float*> pa{a.data()}, pb{b.data()};
    gloo::AllreduceRing<float> ring(classic.context(), pa, static_cast<int>(count));
    gloo::AllreduceRing<float> ring_tuned(tuned.context(), pb, static_cast<int>(count));
    ring.run(), ring_tuned.run();  // Gloo sizes the send buffers on the first call
    raise_send_buffers(tuned_fds);  // after Gloo sized them for this message: it never shrinks them
    std::vector<double> stalls(3, 0.0), worst(3, 0.0);
    auto run = [&](int k, auto&& f) {
      const auto t0 = clock::now();
      f();
      const double ms = std::chrono::duration<double>(clock::now() - t0).count() * 1e3;
      if (ms > 20) stalls[static_cast<std::size_t>(k)] += 1;
      worst[static_cast<std::size_t>(k)] = std::max(worst[static_cast<std::size_t>(k)], ms);
    };
    for (int i = 0; i < calls; ++i) run(0, [&] { ring.run(); });
    for (int i = 0; i < calls; ++i) run(1, [&] { ring_tuned.run(); });
    for (int i = 0; i < calls; ++i) run(2, [&] { ours.allreduce(std::span(c), strata::ReduceOp::Sum); });
    stalls = slowest(stalls);
    worst = slowest(worst);
    if (ours.rank() == 0)
      std::printf("{\"bench\":\"gloo_stall\",\"ranks\":%d,\"bytes\":%zu,\"calls\":%d,\"classic_ring_stalls\":%.0f,"
                  "\"classic_ring_worst_ms\":%.1f,\"classic_ring_sndbuf_4mib_stalls\":%.0f,"
                  "\"classic_ring_sndbuf_4mib_worst_ms\":%.1f,\"strata_stalls\":%.0f,\"strata_worst_ms\":%.1f}\n",
                  ours.size(), bytes, calls, stalls[0], worst[0], stalls[1], worst[1], stalls[2], worst[2]);
  }
}
