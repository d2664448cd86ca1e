// src/metrics: the text exposition format, the registry, the listen address,
// the textfile and the HTTP endpoint (a real socket on loopback).
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "metrics/exporter.h"
#include "metrics/exposition.h"
#include "metrics/listen.h"
#include "metrics/registry.h"
#include "metrics/run_metrics.h"
#include "metrics/textfile.h"

namespace fs = std::filesystem;
using namespace kiln::metrics;

TEST(Exposition, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value("plain"), "plain");
  EXPECT_EQ(escape_label_value("a\"b"), "a\\\"b");
  EXPECT_EQ(escape_label_value("C:\\dir"), "C:\\\\dir");
  EXPECT_EQ(escape_label_value("two\nlines"), "two\\nlines");
  EXPECT_EQ(escape_label_value("\\\"\n"), "\\\\\\\"\\n");
  EXPECT_EQ(escape_label_value("NVIDIA H200 · µs"), "NVIDIA H200 · µs");  // UTF-8 passes through
}

TEST(Exposition, EscapesHelpButNotQuotes) {
  EXPECT_EQ(escape_help("say \"hi\"\\now\nthen"), "say \"hi\"\\\\now\\nthen");
}

TEST(Exposition, FormatsValues) {
  EXPECT_EQ(format_value(0), "0");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(-12), "-12");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(1.5e-6), "1.5e-06");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // reads back exactly
  EXPECT_EQ(format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(std::stod(format_value(1e300)), 1e300);
}

TEST(Exposition, Names) {
  EXPECT_TRUE(valid_metric_name("kiln_jobs"));
  EXPECT_TRUE(valid_metric_name("job:rate5m"));
  EXPECT_FALSE(valid_metric_name("9lives"));
  EXPECT_FALSE(valid_metric_name("kiln-jobs"));
  EXPECT_FALSE(valid_metric_name(""));
  EXPECT_TRUE(valid_label_name("op"));
  EXPECT_FALSE(valid_label_name("__name__"));
  EXPECT_FALSE(valid_label_name("a:b"));
  EXPECT_FALSE(valid_label_name("1x"));
}

TEST(Registry, RendersFamiliesByNameSeriesByLabelsWithHelpAndType) {
  Registry r;
  r.define("zz_last", Type::kGauge, "Defined first, rendered last.");
  r.define("aa_events_total", Type::kCounter, "Events by kind.\nSecond line \\ here.", {"kind", "where"});
  r.add("aa_events_total", {"b", "x"}, 2);
  r.add("aa_events_total", {"a", "say \"hi\"\n"}, 1);
  r.add("aa_events_total", {"a", "say \"hi\"\n"}, 0.5);
  r.set("zz_last", {}, -3.25);
  const std::string want =
      "# HELP aa_events_total Events by kind.\\nSecond line \\\\ here.\n"
      "# TYPE aa_events_total counter\n"
      "aa_events_total{kind=\"a\",where=\"say \\\"hi\\\"\\n\"} 1.5\n"
      "aa_events_total{kind=\"b\",where=\"x\"} 2\n"
      "# HELP zz_last Defined first, rendered last.\n"
      "# TYPE zz_last gauge\n"
      "zz_last -3.25\n";
  EXPECT_EQ(r.render(), want);
}

TEST(Registry, EmptyFamilyStillDeclared) {
  Registry r;
  r.define("kiln_x_total", Type::kCounter, "x", {"a"});
  EXPECT_EQ(r.render(), "# HELP kiln_x_total x\n# TYPE kiln_x_total counter\n");
}

TEST(Registry, TypesAreEnforced) {
  Registry r;
  EXPECT_THROW(r.define("bad_counter", Type::kCounter, "no _total"), std::logic_error);
  EXPECT_THROW(r.define("bad_gauge_total", Type::kGauge, "a gauge named like a counter"), std::logic_error);
  EXPECT_THROW(r.define("bad-name", Type::kGauge, "x"), std::logic_error);
  EXPECT_THROW(r.define("g", Type::kGauge, "x", {"__reserved"}), std::logic_error);
  EXPECT_THROW(r.define("g", Type::kGauge, "x", {"a", "a"}), std::logic_error);
  r.define("c_total", Type::kCounter, "c");
  r.define("g", Type::kGauge, "g", {"l"});
  EXPECT_THROW(r.define("g", Type::kGauge, "again"), std::logic_error);
  EXPECT_THROW(r.add("c_total", {}, -1), std::logic_error);
  EXPECT_THROW(r.set("c_total", {}, 5), std::logic_error);
  EXPECT_THROW(r.raise_to("g", {"x"}, 5), std::logic_error);
  EXPECT_THROW(r.set("g", {}, 1), std::logic_error);          // one label expected
  EXPECT_THROW(r.set("g", {"a", "b"}, 1), std::logic_error);
  EXPECT_THROW(r.add("nope_total", {}, 1), std::logic_error);
  r.add("c_total", {}, 2);
  r.raise_to("c_total", {}, 1);  // never goes back
  EXPECT_EQ(r.value("c_total"), 2);
  r.raise_to("c_total", {}, 7);
  EXPECT_EQ(r.value("c_total"), 7);
  r.set("g", {"x"}, 4);
  r.add("g", {"x"}, -5);  // gauges go down
  EXPECT_EQ(r.value("g", {"x"}), -1);
  r.remove("g", {"x"});
  EXPECT_FALSE(r.value("g", {"x"}));
  r.remove("g", {"x"});  // absent: no-op
}

TEST(Registry, ConcurrentPublishAndRender) {
  Registry r;
  r.define("n_total", Type::kCounter, "n", {"t"});
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&r, t] {
      for (int i = 0; i < 10000; ++i) r.add("n_total", {std::to_string(t)}, 1);
    });
  for (int i = 0; i < 100; ++i) EXPECT_NE(r.render().find("# TYPE n_total counter"), std::string::npos);
  for (auto& t : ts) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(r.value("n_total", {std::to_string(t)}), 10000);
}

TEST(Listen, ParsesAndRefusesNonLoopback) {
  auto a = parse_listen("127.0.0.1:9464", false);
  EXPECT_EQ(a.host.to_string(), "127.0.0.1");
  EXPECT_EQ(a.port, 9464);
  EXPECT_EQ(parse_listen("localhost:0", false).host.to_string(), "127.0.0.1");
  EXPECT_EQ(parse_listen("[::1]:80", false).host.to_string(), "::1");
  for (const char* bad : {"9464", ":9464", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:9x", "host.example:80", "[::1:80"})
    EXPECT_THROW(parse_listen(bad, false), std::invalid_argument) << bad;
  try {
    parse_listen("0.0.0.0:9464", false);
    FAIL() << "0.0.0.0 accepted without the flag";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--metrics-allow-remote"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_listen("10.1.2.3:9464", false), std::invalid_argument);
  EXPECT_EQ(parse_listen("0.0.0.0:9464", true).host.to_string(), "0.0.0.0");
}

namespace {

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("kiln-metrics-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

namespace http = boost::beast::http;

http::response<http::string_body> fetch(unsigned short port, http::verb verb, const std::string& target) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), port});
  http::request<http::string_body> req{verb, target, 11};
  req.set(http::field::host, "127.0.0.1");
  if (verb == http::verb::post) req.body() = "x=1";
  req.prepare_payload();
  http::write(sock, req);
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.skip(verb == http::verb::head);
  http::read(sock, buf, parser);
  return parser.release();
}

}  // namespace

TEST(Textfile, WritesAtomicallyAndChecksTheDirectory) {
  const auto d = temp_dir("textfile");
  const auto p = d / "kiln.prom";
  write_textfile(p, "a 1\n");
  write_textfile(p, "a 2\n");
  EXPECT_EQ(slurp(p), "a 2\n");
  int files = 0;
  for (auto& e : fs::directory_iterator(d)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // no temporary left behind
  EXPECT_NO_THROW(check_textfile_path(p));
  EXPECT_THROW(check_textfile_path(d / "missing" / "kiln.prom"), std::invalid_argument);
  EXPECT_THROW(check_textfile_path(d), std::invalid_argument);
  EXPECT_THROW(write_textfile(d / "missing" / "kiln.prom", "x"), std::runtime_error);
  fs::remove_all(d);
}

TEST(Exporter, ServesMetricsOverHttp) {
  Registry r;
  r.define("kiln_test_total", Type::kCounter, "a test counter", {"l"});
  r.add("kiln_test_total", {"q\"uote"}, 3);
  ExporterOptions o;
  o.listen = parse_listen("127.0.0.1:0", false);
  Exporter ex(r, o);
  ASSERT_NE(ex.port(), 0);
  EXPECT_EQ(ex.bound(), "127.0.0.1:" + std::to_string(ex.port()));

  auto res = fetch(ex.port(), http::verb::get, "/metrics");
  EXPECT_EQ(res.result(), http::status::ok);
  EXPECT_EQ(res[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(res.body(), "# HELP kiln_test_total a test counter\n# TYPE kiln_test_total counter\n"
                        "kiln_test_total{l=\"q\\\"uote\"} 3\n");
  // a value published meanwhile shows in the next scrape
  r.add("kiln_test_total", {"q\"uote"}, 1);
  EXPECT_NE(fetch(ex.port(), http::verb::get, "/metrics?x=1").body().find("} 4\n"), std::string::npos);
  EXPECT_EQ(fetch(ex.port(), http::verb::get, "/nothing").result(), http::status::not_found);
  auto post = fetch(ex.port(), http::verb::post, "/metrics");
  EXPECT_EQ(post.result(), http::status::method_not_allowed);
  EXPECT_EQ(post[http::field::allow], "GET, HEAD");
  auto head = fetch(ex.port(), http::verb::head, "/metrics");
  EXPECT_EQ(head.result(), http::status::ok);
  ex.stop();
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket sock(io);
  boost::system::error_code ec;
  sock.connect({boost::asio::ip::make_address("127.0.0.1"), ex.port()}, ec);
  EXPECT_TRUE(ec) << "still listening after stop()";
}

TEST(Exporter, RefusesAPortInUse) {
  Registry r;
  ExporterOptions o;
  o.listen = parse_listen("127.0.0.1:0", false);
  Exporter a(r, o);
  o.listen->port = a.port();
  try {
    Exporter b(r, o);
    FAIL() << "bound twice";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(a.port())), std::string::npos) << e.what();
  }
}

TEST(Exporter, SilentClientDoesNotBlockOthers) {
  Registry r;
  r.define("g", Type::kGauge, "g");
  r.set("g", {}, 1);
  ExporterOptions o;
  o.listen = parse_listen("127.0.0.1:0", false);
  Exporter ex(r, o);
  boost::asio::io_context io;
  boost::asio::ip::tcp::socket idle(io);
  idle.connect({boost::asio::ip::make_address("127.0.0.1"), ex.port()});  // connects, sends nothing
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(fetch(ex.port(), http::verb::get, "/metrics").result(), http::status::ok);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(Exporter, TextfilePeriodicAndFinal) {
  const auto d = temp_dir("exporter");
  Registry r;
  r.define("g", Type::kGauge, "g");
  r.set("g", {}, 1);
  ExporterOptions o;
  o.textfile = d / "kiln.prom";
  o.textfile_interval_s = 0.05;
  Exporter ex(r, o);
  EXPECT_EQ(slurp(d / "kiln.prom"), "# HELP g g\n# TYPE g gauge\ng 1\n");  // written at start
  r.set("g", {}, 2);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (slurp(d / "kiln.prom").find("g 2\n") == std::string::npos && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_NE(slurp(d / "kiln.prom").find("g 2\n"), std::string::npos) << "no periodic rewrite";
  r.set("g", {}, 3);
  ex.stop();
  EXPECT_EQ(slurp(d / "kiln.prom"), "# HELP g g\n# TYPE g gauge\ng 3\n");  // the final values
  fs::remove_all(d);
}

TEST(RunMetrics, PublishesTheRunsEvents) {
  Registry r;
  RunMetrics m(r);
  EXPECT_EQ(r.value("kiln_jobs", {"queued"}), 0);  // every state present from the start
  m.jobs_by_state({{"queued", 3}, {"done", 2}});
  EXPECT_EQ(r.value("kiln_jobs", {"queued"}), 3);
  EXPECT_EQ(r.value("kiln_jobs", {"running"}), 0);
  m.evaluation("ok", 1.5, 0.25, 2);
  m.evaluation("compile_error", 0.5, 0, 0);
  EXPECT_EQ(r.value("kiln_candidates_evaluated_total", {"ok"}), 1);
  EXPECT_EQ(r.value("kiln_candidates_evaluated_total", {"compile_error"}), 1);
  EXPECT_EQ(r.value("kiln_compile_seconds_total"), 2);
  EXPECT_EQ(r.value("kiln_bench_seconds_total"), 2);
  const JobLabels job{7, "softmax", "16x64", "fp32", "H200"};
  m.best_so_far(job, "estimated", 2e-6);
  m.best_so_far(job, "measured", 1e-6);  // the basis changed: one series, the new one
  EXPECT_FALSE(r.value("kiln_job_best_latency_seconds", {"7", "softmax", "16x64", "fp32", "H200", "estimated"}));
  EXPECT_EQ(r.value("kiln_job_best_latency_seconds", {"7", "softmax", "16x64", "fp32", "H200", "measured"}), 1e-6);
  m.job_finished(job, true);
  EXPECT_FALSE(r.value("kiln_job_best_latency_seconds", {"7", "softmax", "16x64", "fp32", "H200", "measured"}));
  EXPECT_EQ(r.value("kiln_jobs_finished_total", {"done"}), 1);
  m.gpu("3", 10, 4, 2, 20);
  m.gpu("3", 9, 4, 2, 21);  // a recomputed union never lowers the counter
  EXPECT_EQ(r.value("kiln_gpu_held_seconds_total", {"3"}), 10);
  EXPECT_DOUBLE_EQ(*r.value("kiln_gpu_busy_ratio", {"3", "device_kernel"}), 2.0 / 21);
  EXPECT_FALSE(r.value("kiln_gpu_busy_ratio", {"3", "driver"}));  // no samples yet: no series
  m.gpu_driver("3", 0.67);
  EXPECT_DOUBLE_EQ(*r.value("kiln_gpu_busy_ratio", {"3", "driver"}), 0.67);
  m.llm_call("qwen", "ok", 100, std::nullopt, 1.5);
  EXPECT_EQ(r.value("kiln_llm_tokens_total", {"qwen", "prompt"}), 100);
  EXPECT_FALSE(r.value("kiln_llm_tokens_total", {"qwen", "completion"}));
  m.worker_restart("timeout");
  EXPECT_EQ(r.value("kiln_worker_restarts_total", {"timeout"}), 1);
  EXPECT_THROW(RunMetrics again(r), std::logic_error);  // families exist already
}
