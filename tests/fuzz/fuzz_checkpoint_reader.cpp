// libFuzzer target for the checkpoint reader (RELIABILITY C4): any bytes either parse into
// entries whose every length lies inside the input, or raise strata::data_error — never a
// crash, a leak, an overlong allocation or another exception. Built by tests/fuzz/run_fuzz.sh
// with clang -fsanitize=fuzzer,address,undefined.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <strata/checkpoint/file.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<unsigned char> bytes(data, data + size);
  try {
    const strata::checkpoint::Reader r(std::move(bytes), "fuzz");
    for (const auto& e : r.entries()) {
      if (e.offset + e.bytes > size) std::abort();  // a length outside the input got through
      try {
        (void)r.read(e.name);
      } catch (const strata::checksum_error&) {
      }
    }
  } catch (const strata::data_error&) {
  }
  return 0;
}
