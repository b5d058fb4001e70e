// The job report's pieces (runtime/server/src/control/job_report.hpp) without a server: the bounded
// ledger of departed clients, the ordering and the table of the text, the JSON, and a report
// that cannot be written.  tests/client/job_report.sh runs the whole of it on a sim server.
#include "control/job_report.hpp"
#include "funnel/ipc/commands.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace funnel::server {
namespace {

ClientRecord record(uint32_t id, int rank, const char* command) {
  ClientRecord r;
  r.id = id;
  r.pid = static_cast<pid_t>(1000 + id);
  r.mpi_rank = rank;
  r.command = command;
  r.home_device = 0;
  r.left = std::chrono::system_clock::now();
  r.attached = r.left - std::chrono::seconds(2);
  r.launches = 10 * id;
  r.gpu_busy_ns = 1500000000;
  return r;
}

TEST(ClientLedger, PastItsCapacityOnlyCounts) {
  ClientLedger ledger(2);
  for (uint32_t id = 1; id <= 5; ++id) ledger.add(record(id, -1, "./a"), ClientEnd::Detached);
  ASSERT_EQ(ledger.entries().size(), 2u);
  EXPECT_EQ(ledger.entries()[1].record.id, 2u);
  EXPECT_EQ(ledger.dropped(), 3u);
}

TEST(ClientRecord, JsonHasFunnelctlsNames) {
  const auto j = to_json(record(3, 1, "./app --steps 1"));
  EXPECT_EQ(j.at("id"), 3);
  EXPECT_EQ(j.at("mpi_rank"), 1);
  EXPECT_EQ(j.at("launches"), 30);
  EXPECT_DOUBLE_EQ(j.at("gpu_busy_s").get<double>(), 1.5);
  EXPECT_NEAR(j.at("attached_s").get<double>(), 2.0, 1e-6);
  for (const char* k : {"pid", "command", "home_device", "gpu_fraction", "device_memory_peak_bytes", "commands",
                        "bytes_h2d", "bytes_d2h", "local_messages", "local_bytes", "errors"})
    EXPECT_TRUE(j.contains(k)) << k;
  ClientRecord attaching = record(4, -1, "./b");
  attaching.home_device = -1;
  EXPECT_TRUE(to_json(attaching).at("home_device").is_null());
}

TEST(ClientRecord, PickupDelaysAsBucketBoundsOfTheirQuantiles) {
  EXPECT_EQ(pickup_bucket(0), 0u);
  EXPECT_EQ(pickup_bucket(1), 1u);
  EXPECT_EQ(pickup_bucket(3), 2u);
  EXPECT_EQ(pickup_bucket(1000), 10u);
  EXPECT_EQ(pickup_bucket(65535), kPickupBuckets - 1);
  EXPECT_EQ(time_bucket(5), 3u);
  EXPECT_EQ(time_bucket(1'000'000), kPickupBuckets - 1) << "a second's work counts in the last bucket";
  std::array<uint64_t, kPickupBuckets> b{};
  const auto none = pickup_json(b);
  EXPECT_EQ(none.at("calls"), 0);
  EXPECT_TRUE(none.at("p50").is_null());
  b[3] = 90;  // 4-7 us
  b[10] = 9;  // 512-1023 us
  b[14] = 1;  // 8-16 ms
  const auto j = pickup_json(b);
  EXPECT_EQ(j.at("calls"), 100);
  EXPECT_EQ(j.at("p50"), 8);
  EXPECT_EQ(j.at("p90"), 8);
  EXPECT_EQ(j.at("p99"), 1024);
  EXPECT_EQ(j.at("max"), 16384);
  ClientRecord r = record(5, 0, "./c");
  r.pickup = b;
  EXPECT_EQ(to_json(r).at("call_pickup_us"), j);
  EXPECT_EQ(to_json(r).at("call_submit_us").at("calls"), 0);
  r.submit = b;
  EXPECT_EQ(to_json(r).at("call_submit_us"), j);
}

TEST(ClientRecord, WaitedCallsByCommandName) {
  ClientRecord r = record(6, 0, "./d");
  EXPECT_TRUE(to_json(r).at("waited_calls").is_object());
  EXPECT_TRUE(to_json(r).at("waited_calls").empty());
  r.waited[static_cast<size_t>(ipc::Opcode::FuncGetAttributes)] = 2035;
  r.waited[static_cast<size_t>(ipc::Opcode::MemAlloc)] = 3;
  r.waited[kOpcodeSlots - 1] = 1;  // no command has that number
  const auto j = to_json(r).at("waited_calls");
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j.at("FuncGetAttributes"), 2035);
  EXPECT_EQ(j.at("MemAlloc"), 3);
  EXPECT_EQ(j.at("opcode 127"), 1);
}

TEST(ClientRecord, CpuTimesFromSchedstat) {
  const auto t = parse_schedstat("4580791 353787 12\n");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->run_ns, 4580791u);
  EXPECT_EQ(t->wait_ns, 353787u);
  for (const char* bad : {"", "1 2", "1 2 3 4", "a b c", "1 -2 3", "1 2 3x"}) EXPECT_FALSE(parse_schedstat(bad)) << bad;
  // This thread's, as the worker reads its own (kernels without schedstat give none).
  if (std::filesystem::exists("/proc/thread-self/schedstat")) {
    // The kernel adds a running thread's time to its sum at a tick or when it leaves the CPU:
    // a test process younger than a tick read 0 once (CI).  A sleep makes it leave the CPU.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto own = own_cpu_times();
    ASSERT_TRUE(own.has_value());
    EXPECT_GT(own->run_ns, 0u);
    const auto all = process_cpu_times(::getpid());
    ASSERT_TRUE(all.has_value());
    EXPECT_GE(all->run_ns, own->run_ns);
  }
  EXPECT_FALSE(process_cpu_times(-5).has_value());
  ClientRecord r = record(6, 0, "./d");
  const auto none = to_json(r).at("cpu_s");
  for (const char* k : {"worker", "worker_runqueue", "client", "client_runqueue"}) EXPECT_TRUE(none.at(k).is_null()) << k;
  r.worker_cpu = CpuTimes{1500000000, 250000000};
  const auto j = to_json(r).at("cpu_s");
  EXPECT_DOUBLE_EQ(j.at("worker").get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j.at("worker_runqueue").get<double>(), 0.25);
  EXPECT_TRUE(j.at("client").is_null());
}

JobReport sample() {
  JobReport r;
  r.server.pid = 42;
  r.server.host = "node01";
  r.server.backend = "sim";
  r.server.devices = 2;
  r.server.stopped = std::chrono::system_clock::now();
  r.server.started = r.server.stopped - std::chrono::seconds(60);
  r.server.attached = 7;
  r.server.detached = 4;
  r.server.died = 1;
  r.clients = {{record(2, 1, "./app"), ClientEnd::Died},
               {record(1, -1, "./prep"), ClientEnd::Detached},
               {record(3, 0, "./app"), ClientEnd::AttachedAtStop}};
  r.dropped = 3;
  return r;
}

TEST(JobReport, TextHasAHeaderAndOneAlignedRowPerClient) {
  const JobReport r = sample();
  const ReportPaths p = report_paths("/logs", "node 01", 42);
  EXPECT_EQ(p.text, "/logs/funnel-report-node_01-42.txt");
  EXPECT_EQ(p.chart, "/logs/funnel-report-node_01-42.png");
  const std::string text = report_text(r, p, "not drawn: test");
  EXPECT_NE(text.find("clients   7 attached: 4 detached, 1 died, 0 terminated, 1 attached at stop\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("dropped   3 client record(s) past the first 3 are not listed"), std::string::npos) << text;
  EXPECT_NE(text.find("chart     not drawn: test\n"), std::string::npos) << text;
  std::istringstream in(text.substr(text.rfind('\n', text.find("RANK")) + 1));
  std::string header, line;
  std::getline(in, header);
  const size_t ended_at = header.find("ENDED");
  int rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    EXPECT_EQ(line.find_first_not_of(' ', ended_at), ended_at) << line;  // every row's ENDED lines up
  }
  EXPECT_EQ(rows, 3);
}

TEST(JobReport, TextHasThePickUpAndTheWorkersCpuTimes) {
  JobReport r = sample();
  r.clients[0].record.pickup[3] = 90;   // 4-7 us
  r.clients[0].record.pickup[12] = 10;  // 2-4 ms
  r.clients[0].record.worker_cpu = CpuTimes{1500000000, 250000000};
  const std::string text = report_text(r, report_paths("/logs", "node01", 42), "not drawn: test");
  const size_t header = text.find("RANK");
  ASSERT_NE(header, std::string::npos) << text;
  EXPECT_NE(text.find("GPU BUSY S  PICKUP US  WORKER CPU S  WORKER RUNQ S  ERRORS", header), std::string::npos)
      << text;
  // Rank 1's row: p50 8 us, p99 4096 us; then its worker's seconds on a core and in the run queue.
  EXPECT_NE(text.find(" 8/4096         1.500          0.250 "), std::string::npos) << text;
  // The others have no waited call and no worker times (as a pooled worker's): dashes.
  EXPECT_NE(text.find("1.500          -             -              -       0  attached at stop"), std::string::npos)
      << text;
  EXPECT_EQ(pickup_quantile_us(r.clients[0].record.pickup, 0.5), 8u);
  EXPECT_EQ(pickup_quantile_us(r.clients[0].record.pickup, 0.9), 8u);  // the 90th of 100 calls
  EXPECT_EQ(pickup_quantile_us(r.clients[0].record.pickup, 1.0), 4096u);
  EXPECT_FALSE(pickup_quantile_us(r.clients[1].record.pickup, 0.5).has_value());
}

TEST(JobReport, JsonHasTheServerTheClientsAndTheDropped) {
  const auto j = report_json(sample());
  EXPECT_EQ(j.at("server").at("pid"), 42);
  EXPECT_EQ(j.at("server").at("devices"), nlohmann::json::array({0, 1}));
  EXPECT_EQ(j.at("server").at("clients_attached"), 7);
  EXPECT_NEAR(j.at("server").at("uptime_s").get<double>(), 60.0, 1e-6);
  EXPECT_EQ(j.at("server").at("stopped").get<std::string>().back(), 'Z');
  EXPECT_EQ(j.at("dropped_records"), 3);
  ASSERT_EQ(j.at("clients").size(), 3u);
  EXPECT_EQ(j.at("clients")[0].at("ended"), "died");
  EXPECT_EQ(j.at("clients")[2].at("ended"), "attached at stop");
}

TEST(JobReport, AnUnwritableDirectoryIsNoError) { EXPECT_NO_THROW(write_job_report("/proc/no-such-dir", sample())); }

}  // namespace
}  // namespace funnel::server
