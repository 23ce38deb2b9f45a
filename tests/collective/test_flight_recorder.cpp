#include "doctest.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <strata/collective/flight_diagnosis.hpp>
#include <strata/collective/flight_recorder.hpp>

using strata::collective::FlightDump;
using strata::collective::FlightRecord;
using strata::collective::FlightRecorder;
using strata::collective::Fingerprint;
using strata::collective::OpKind;

namespace {

std::string flight_scratch_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / (std::string(name) + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

Fingerprint flight_allreduce(std::uint64_t seq, std::uint64_t count) {
  return {OpKind::allreduce, strata::ReduceOp::Sum, strata::DType::f32, count, 0, seq};
}

FlightRecord flight_record(std::uint64_t seq, const char* op, const char* state, std::int64_t start_ns, std::int64_t end_ns = 0) {
  FlightRecord r;
  r.seq = seq;
  r.op = op;
  r.reduce = "sum";
  r.dtype = "float32";
  r.count = 262144;
  r.label = "bucket 3";
  r.state = state;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  return r;
}

// Rank `rank` of 4 whose last entries are `entries`, its file written at now_ns = 40 s.
FlightDump flight_dump_of(int rank, std::vector<FlightRecord> entries) {
  FlightDump d;
  d.rank = rank;
  d.size = 4;
  d.pid = 100 + rank;
  d.host = "h";
  d.reason = rank == 3 ? "fatal signal 15 (SIGTERM: the launcher ended the job)" : "timeout";
  d.now_ns = 40'000'000'000;
  d.groups.push_back({"mpi", rank, 4});
  d.entries = std::move(entries);
  return d;
}

}  // namespace

TEST_CASE("Collective.FlightRecorder.KeepsTheLastEntriesAndWritesThemBack") {
  const std::string dir = flight_scratch_dir("strata-flight-test");
  FlightRecorder r(4);
  r.set_directory(dir);
  CHECK(r.group("gloo", 2, 3) == 0);
  CHECK(r.group("mpi", 0, 2) == 1);
  CHECK(r.path() == dir + "/rank2.flight");
  std::uint64_t last = 0;
  for (std::uint64_t seq = 0; seq < 6; ++seq) {  // six collectives in a ring of four: #2-#5 stay
    FlightRecorder::Label label("bucket", static_cast<std::int64_t>(seq));
    last = r.start(seq == 5 ? 1 : 0, flight_allreduce(seq, 1000 + seq));
    if (seq < 4) r.finish(last);
    if (seq == 4) r.finish(last, false);
  }
  REQUIRE(r.dump("a test\twith a tab"));
  const FlightDump d = strata::collective::read_flight_dump(r.path());
  CHECK(d.rank == 2);
  CHECK(d.size == 3);
  CHECK(d.pid == ::getpid());
  CHECK(d.reason == "a test with a tab");
  REQUIRE(d.groups.size() == 2);
  CHECK(d.groups[0].kind == "gloo");
  CHECK(d.groups[1].rank == 0);
  CHECK(d.groups[1].size == 2);
  REQUIRE(d.entries.size() == 4);
  CHECK(d.entries.front().seq == 2);
  CHECK(d.entries.front().label == "bucket 2");
  CHECK(d.entries.front().count == 1002);
  CHECK(d.entries.front().op == "allreduce");
  CHECK(d.entries.front().dtype == "float32");
  CHECK(d.entries.front().state == "completed");
  CHECK(d.entries.front().end_ns >= d.entries.front().start_ns);
  CHECK(d.entries[2].state == "failed");
  CHECK(d.entries.back().seq == 5);
  CHECK(d.entries.back().group == 1);
  CHECK(d.entries.back().state == "started");
  CHECK(d.entries.back().end_ns == 0);
  CHECK(d.now_ns >= d.entries.back().start_ns);
  r.finish(last);  // a finish after the dump: the next one says so
  REQUIRE(r.dump("again"));
  CHECK(strata::collective::read_flight_dump(r.path()).entries.back().state == "completed");
  std::filesystem::remove_all(dir);
}

TEST_CASE("Collective.FlightRecorder.OffRecordsAndWritesNothing") {
  FlightRecorder r(0);
  CHECK_FALSE(r.enabled());
  CHECK(r.start(0, flight_allreduce(0, 1)) == 0);
  r.finish(0);
  CHECK_FALSE(r.dump("nothing"));
}

TEST_CASE("Collective.FlightDiagnosis.NamesTheRankThatNeverEntered") {
  // Ranks 0-2 entered all-reduce #7 at 10 s and still wait; rank 3 completed #6 and no more.
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 3; ++r)
    dumps.push_back(flight_dump_of(r, {flight_record(6, "allreduce", "completed", 9'000'000'000, 9'500'000'000),
                                flight_record(7, "allreduce", "started", 10'000'000'000 + r)}));
  dumps.push_back(flight_dump_of(3, {flight_record(6, "allreduce", "completed", 9'000'000'000, 9'500'000'000)}));
  const std::string text = strata::collective::diagnose(dumps);
  CHECK_MESSAGE(text.find("rank 3 never entered allreduce #7 (bucket 3, float32 x 262144, 1.0 MiB); ranks 0-2 have "
                          "waited 30.0 s in it\n") == 0, text);
  CHECK_MESSAGE(text.find("rank 3 (h, pid 103): fatal signal 15 (SIGTERM: the launcher ended the job); last: "
                          "allreduce #6 completed") != std::string::npos, text);
}

TEST_CASE("Collective.FlightDiagnosis.NamesTheRankThatCalledAnotherCollective") {
  std::vector<FlightDump> dumps;
  for (int r = 0; r < 4; ++r)
    dumps.push_back(flight_dump_of(r, {flight_record(7, r == 1 ? "broadcast" : "allreduce", "started", 10'000'000'000)}));
  const std::string text = strata::collective::diagnose(dumps);
  CHECK_MESSAGE(text.find("at #7 rank 1 called broadcast #7 (bucket 3, root 0, float32 x 262144, 1.0 MiB), the others, "
                          "ranks 0, 2 and 3, allreduce #7") == 0, text);
}

TEST_CASE("Collective.FlightDiagnosis.SaysWhenNothingWasPendingAndWhoLeftNoFile") {
  std::vector<FlightDump> dumps{flight_dump_of(0, {flight_record(5, "allreduce", "completed", 1, 2)}),
                                flight_dump_of(1, {flight_record(5, "allreduce", "completed", 1, 2)})};
  CHECK(strata::collective::diagnose(dumps).find("no collective was in progress on any rank; the last recorded is #5\n") == 0);
  dumps[0].entries.push_back(flight_record(6, "allreduce", "started", 3));
  dumps[1].entries.push_back(flight_record(6, "allreduce", "started", 3));
  const std::string text = strata::collective::diagnose(dumps);
  CHECK_MESSAGE(text.find("ranks 0 and 1 are in allreduce #6") == 0, text);
  CHECK_MESSAGE(text.find("ranks 2 and 3 left no file") != std::string::npos, text);
}

TEST_CASE("Collective.FlightDiagnosis.RefusesWhatIsNotAFlightFile") {
  const std::string dir = flight_scratch_dir("strata-flight-bad");
  std::filesystem::create_directories(dir);
  CHECK_THROWS_WITH(strata::collective::read_flight_dumps(dir), doctest::Contains("no flight-recorder files"));
  std::ofstream(dir + "/rank0.flight") << "strata-flight-recorder 1\nrank 0\nentries\tgroup\nentry\t0\t1\n";
  CHECK_THROWS_WITH(strata::collective::read_flight_dumps(dir), doctest::Contains("rank0.flight:4: an entry has 12"));
  std::ofstream(dir + "/rank0.flight") << "a checkpoint\n";
  CHECK_THROWS_WITH(strata::collective::read_flight_dumps(dir), doctest::Contains("not a strata flight-recorder file"));
  std::filesystem::remove_all(dir);
}
