// strata's error messages (support/error.hpp, support/check.hpp): every kind of part reads as
// operator<< writes it into a plain std::ostringstream, in order, with the id before and the
// place after, and a check throws the type it names.
#include "doctest.hpp"

#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>

#include <strata/ops/shape_ops.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/factory.hpp>

namespace {

struct Point {  // a user's type, its operator<< found by argument-dependent lookup
  int x, y;
};
std::ostream& operator<<(std::ostream& os, const Point& p) { return os << "(" << p.x << ", " << p.y << ")"; }

template <class... Parts>
std::string reference(const Parts&... parts) {  // the parts written directly
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <class F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const strata::invalid_argument& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST_CASE("Errors.Messages: every kind of part reads as operator<< writes it, in order") {
  const std::string s = "a string";
  const std::string_view sv = "a view";
  char buffer[16] = "a buffer";
  const char* pointer = "a pointer";
  const Point p{3, -4};
  const std::int64_t big = -(std::int64_t{1} << 40);
  const std::uint8_t byte = 65;  // written as the character 'A', as operator<< does
  CHECK(strata::detail::make_message("literal ", s, ' ', sv, buffer, pointer, 42, 2.5, -0.125f, true, big, byte, p) ==
        reference("literal ", s, ' ', sv, buffer, pointer, 42, 2.5, -0.125f, true, big, byte, p));
  // Manipulators act on the parts after them, as in a stream.
  CHECK(strata::detail::make_message(std::hex, 255, " ", std::dec, 255, " ", std::fixed, std::setprecision(2), 1.0) ==
        reference(std::hex, 255, " ", std::dec, 255, " ", std::fixed, std::setprecision(2), 1.0));
  CHECK(strata::detail::make_message() == "");
  CHECK(strata::detail::error_text("strata.test") == "[strata.test] ");
  CHECK(strata::detail::error_text("strata.test", "x ", 1) == "[strata.test] x 1");
}

TEST_CASE("Errors.Messages: a failed check throws invalid_argument with the condition, the parts and the place") {
  const int channels = 3;
  const std::string name = "conv1";
  const int line = __LINE__ + 1;
  const std::string what = thrown_message([&] { STRATA_CHECK(channels == 4, "layer ", name, " has ", channels, " channels"); });
  CHECK(what == "[strata.check] check failed: channels == 4: layer conv1 has 3 channels (test_error_messages.cpp:" +
                    std::to_string(line) + ")");
  const std::string eq = thrown_message([&] { STRATA_CHECK_EQ(channels, 4, "of ", name); });
  CHECK(eq.rfind("[strata.check] check failed: channels == 4 (3 vs 4): of conv1 (", 0) == 0);
  CHECK(thrown_message([&] { STRATA_CHECK(channels == 3, "never"); }) == "(nothing thrown)");
  CHECK_THROWS_AS(STRATA_THROW(strata::io_error, "strata.test", "disk ", 7), strata::io_error);
  CHECK_THROWS_WITH(STRATA_THROW(strata::io_error, "strata.test", "disk ", 7),
                    doctest::Contains("[strata.test] disk 7 ("));
}

TEST_CASE("Errors.Messages: the place is the library's own path, or a file's name, never the build's path to it") {
  using strata::detail::source_place;
  CHECK(std::string(source_place("../../../work/main/include/strata/checkpoint/file.hpp")) == "strata/checkpoint/file.hpp");
  CHECK(std::string(source_place("/usr/local/include/strata/ops/conv.hpp")) == "strata/ops/conv.hpp");
  CHECK(std::string(source_place("../strategies/strata/strategy/mirrored.hpp")) == "strata/strategy/mirrored.hpp");
  CHECK(std::string(source_place("kernels/strata/kernels/cpu/gemm.hpp")) == "strata/kernels/cpu/gemm.hpp");
  CHECK(std::string(source_place("/home/me/strata/tests/x.cpp")) == "x.cpp");  // a checkout named strata: not a root
  CHECK(std::string(source_place("/src/myinclude/strata/y.hpp")) == "y.hpp");
  CHECK(std::string(source_place("main.cpp")) == "main.cpp");
  // An error a layer raises, as a user sees it.
  const std::string what = thrown_message([] {
    (void)strata::reshape(strata::zeros({6}), {4});
  });
  INFO(what);
  CHECK(what.find("(strata/ops/shape_ops.hpp:") != std::string::npos);
  CHECK(what.find("..") == std::string::npos);
}
