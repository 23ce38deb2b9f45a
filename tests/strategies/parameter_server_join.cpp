// Workers join a running parameter-server job over Gloo, at the transport level
// (ps::Transport<Gloo>: admit_joiners() on the servers, Transport(Joiner) on a joiner). Each
// server builds a joiner's link, hears kWorkerJoinedTag, admits it, and exchanges messages
// with it as with the job's first workers; a joiner killed after joining is reported lost
// like any worker.
//   strata-run --rendezvous tcp --port P -np S+W parameter_server_join job S JOINERS
//   STRATA_MASTER_PORT=P parameter_server_join join|join-kill     (outside strata-run)
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include <strata/strategy/parameter_server/gloo_transport.hpp>

namespace {

using Transport = strata::ps::Transport<strata::collective::Gloo>;
constexpr int kTag = 3;

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "parameter_server_join: FAIL: %s\n", why.c_str());
  std::exit(1);
}

// A worker: to each server its rank, back the rank times 2 plus the server's rank.
void exchange(Transport& t) {
  for (int s : t.roles().servers) {
    std::int64_t out = t.rank(), in = -1;
    std::vector<Transport::Request> rs;
    rs.push_back(t.irecv(&in, sizeof in, s, kTag));
    rs.push_back(t.isend(&out, sizeof out, s, kTag));
    t.wait_all(rs, std::chrono::steady_clock::now() + t.timeout(), [&](const std::string& why) {
      fail("worker rank " + std::to_string(t.rank()) + ": the exchange with server rank " + std::to_string(s) + ": " + why);
    });
    if (in != 2 * out + s)
      fail("worker rank " + std::to_string(t.rank()) + ": server rank " + std::to_string(s) + " answered " +
           std::to_string(in) + ", expected " + std::to_string(2 * out + s));
  }
}

void done(Transport& t) {
  for (int s : t.roles().servers) {
    double v = 0;
    std::vector<Transport::Request> rs;
    rs.push_back(t.isend(&v, sizeof v, s, strata::ps::kDoneTag));
    t.wait_all(rs, std::chrono::steady_clock::now() + t.timeout(), [](const std::string& why) { fail(why); });
  }
}

// A server: answers every worker until the first ones and `joiners` more are done or lost.
int serve(Transport& t, int joiners) {
  t.admit_joiners();
  const int first = static_cast<int>(t.roles().workers.size());
  std::set<int> joined, finished, lost, answered;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (static_cast<int>(finished.size() + lost.size()) < first + joiners) {
    if (std::chrono::steady_clock::now() > deadline) fail("server rank " + std::to_string(t.rank()) + ": not every worker came");
    Transport::Message m;
    if (!t.probe(m)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    if (m.tag == strata::ps::kWorkerJoinedTag) {
      t.admit(m.source);
      joined.insert(m.source);
      std::printf("server rank %d: worker rank %d joined\n", t.rank(), m.source);
    } else if (m.tag == kTag) {
      std::int64_t v = -1;
      t.receive(m, &v);
      if (v != m.source) fail("worker rank " + std::to_string(m.source) + " sent " + std::to_string(v));
      std::int64_t reply = 2 * v + t.rank();
      std::vector<Transport::Request> rs;
      rs.push_back(t.isend(&reply, sizeof reply, m.source, kTag));
      t.wait_all(rs, std::chrono::steady_clock::now() + t.timeout(), [](const std::string& why) { fail(why); });
      answered.insert(m.source);
    } else if (m.tag == strata::ps::kDoneTag) {
      double v = 0;
      t.receive(m, &v);
      finished.insert(m.source);
      std::printf("server rank %d: worker rank %d done\n", t.rank(), m.source);
    } else if (m.tag == strata::ps::kWorkerLostTag) {
      if (finished.count(m.source)) continue;  // its link closed as it ended
      lost.insert(m.source);
      std::printf("server rank %d: worker rank %d lost\n", t.rank(), m.source);
    } else {
      fail("unexpected tag " + std::to_string(m.tag) + " from rank " + std::to_string(m.source));
    }
    std::fflush(stdout);
  }
  if (static_cast<int>(joined.size()) != joiners) fail("server rank " + std::to_string(t.rank()) + ": " +
                                                       std::to_string(joined.size()) + " joined");
  if (static_cast<int>(t.roles().workers.size()) != first + joiners) fail("the workers were not admitted");
  std::printf("server rank %d: %zu workers answered, %zu done, %zu lost\n", t.rank(), answered.size(), finished.size(),
              lost.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "job") {
      if (argc < 4) fail("usage: parameter_server_join job SERVERS JOINERS");
      Transport t(std::atoi(argv[2]));
      if (t.is_server()) return serve(t, std::atoi(argv[3]));
      exchange(t);
      done(t);
      return 0;
    }
    if (mode == "join" || mode == "join-kill") {
      const auto start = std::chrono::steady_clock::now();
      Transport t{Transport::Joiner{}};
      exchange(t);
      std::printf("joiner: rank %d, linked to %zu servers and answered by each %.0f ms after its start\n", t.rank(),
                  t.roles().servers.size(),
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      std::fflush(stdout);
      if (mode == "join-kill") std::raise(SIGKILL);
      done(t);
      return 0;
    }
    fail("unknown mode '" + mode + "'");
  } catch (const std::exception& e) {
    fail(e.what());
  }
}
