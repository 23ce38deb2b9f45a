// The memory a checkpoint write or read takes beyond the state it saves (a parameter server's
// shard of a large table must be saved and restored in about the shard's own memory). A table
// of MB megabytes (float32) is filled, then each way runs in a child process of its own, which
// reports its peak resident memory (getrusage) above the table's:
//   streamed    checkpoint::write_checkpoint: straight from the tensors
//   in_memory   checkpoint::encode then write_file_atomically: the file built in memory first
//   read_into   Reader(path).read_into(table): the file's tensor read into the table in place
//   read_whole  the file read into memory, then read() and copied into the table (the way
//               a restore went before Reader read tensor by tensor)
// Prints one JSON line per way: {"way", "mb", "extra_mb", "seconds"}.
//   bench_checkpoint_memory [MB] [DIR]
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include <strata/checkpoint/file.hpp>
#include <strata/strata.hpp>

using namespace strata;

namespace {
long peak_kb() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
}  // namespace

int main(int argc, char** argv) {
  const long mb = argc > 1 ? std::atol(argv[1]) : 256;
  const std::filesystem::path dir = argc > 2 ? argv[2] : std::filesystem::temp_directory_path();
  for (const std::string way : {"streamed", "in_memory", "read_into", "read_whole"}) {
    const pid_t pid = ::fork();
    if (pid == 0) {  // a fresh peak per way
      const long before = peak_kb();
      Tensor table = full({mb * 1024 * 256}, 0.5);  // mb MiB of float32
      const long with_table = peak_kb();
      const auto path = dir / ("bench_checkpoint_memory_" + std::to_string(::getpid()) + ".strata");
      const bool read = way.rfind("read", 0) == 0;
      if (read) checkpoint::write_checkpoint(path, {{"table", table}});  // takes no memory beyond the table
      const auto t0 = std::chrono::steady_clock::now();
      if (way == "streamed") {
        checkpoint::write_checkpoint(path, {{"table", table}});
      } else if (way == "in_memory") {
        checkpoint::write_file_atomically(path, checkpoint::encode({{"table", table}}));
      } else if (way == "read_into") {
        checkpoint::Reader(path).read_into("table", table);
      } else {
        std::ifstream in(path, std::ios::binary);
        std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        table.copy_(checkpoint::Reader(std::move(bytes), path.string()).read("table"));
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::filesystem::remove(path);
      std::printf("{\"way\": \"%s\", \"mb\": %ld, \"table_mb\": %.1f, \"extra_mb\": %.1f, \"seconds\": %.3f}\n", way.c_str(), mb,
                  (with_table - before) / 1024.0, (peak_kb() - with_table) / 1024.0, s);
      std::fflush(stdout);
      std::_Exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
  }
}
