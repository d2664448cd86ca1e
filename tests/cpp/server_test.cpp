// src/server: charts, shapes, the rate limiter, the tar writer, the answer
// cache against real commits, and the server on a real socket over a real
// (empty) catalog.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "catalog/catalog.h"
#include "manifest/manifest.h"
#include "server/answer_cache.h"
#include "server/api.h"
#include "server/rate_limit.h"
#include "server/server.h"
#include "server/svg.h"
#include "server/tar.h"

namespace fs = std::filesystem;
using namespace kiln;
using namespace kiln::server;

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("kiln-server-test-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// One HTTP/1.1 exchange on a fresh connection: the whole answer.
std::string exchange(unsigned short port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

}  // namespace

TEST(Svg, SeriesGroupsAndMarks) {
  Chart c;
  c.id = "t";
  c.title = "a <title> & more";
  c.y.log = true;
  c.series.push_back({"pts", Mark::kPoints, {{1, 1, {}, {}, "one"}, {2, 10, 5.0, 20.0, ""}, {3, -1, {}, {}, ""}}, "", false});
  c.series.push_back({"line", Mark::kLine, {{1, 2, {}, {}, ""}, {3, 4, {}, {}, ""}}, "", false});
  c.series.push_back({"empty", Mark::kStep, {}, "", false});
  const std::string svg = render_svg(c);
  EXPECT_NE(svg.find("data-chart=\"t\" data-series=\"3\""), std::string::npos);
  EXPECT_EQ(count(svg, "<g class=\"series\""), 3);
  EXPECT_EQ(count(svg, "<circle"), 2);  // the y = -1 point cannot sit on a log axis
  EXPECT_EQ(count(svg, "<path"), 1);    // the empty series draws nothing
  EXPECT_NE(svg.find("a &lt;title&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<title>"), svg.find("<title>a &lt;"));
}

TEST(Api, ParseShape) {
  EXPECT_EQ(*parse_shape("4096x4096"), nlohmann::json::parse("[4096,4096]"));
  EXPECT_EQ(*parse_shape("[8, 64]"), nlohmann::json::parse("[8,64]"));
  EXPECT_EQ(*parse_shape("1,2,3"), nlohmann::json::parse("[1,2,3]"));
  for (const char* bad : {"", "x", "4x", "a", "1;2", "-1", "[1", "1x2x3x4x5x6x7x8x9", "99999999999999"})
    EXPECT_FALSE(parse_shape(bad)) << bad;
}

TEST(Api, BestKeyCoversExactlyItsParameters) {
  const Params q{{"op", "add"}, {"target", "H200"}, {"shape", "4096"}, {"dtype", "fp32"}};
  Params other = q;
  other["batch"] = "x";  // not read by api_best
  EXPECT_EQ(api_best_key(q), api_best_key(other));
  for (const char* p : {"op", "target", "shape", "dtype"}) {
    Params changed = q, missing = q, empty = q;
    changed[p] += "0";
    missing.erase(p);
    empty[p] = "";
    EXPECT_NE(api_best_key(changed), api_best_key(q)) << p;
    EXPECT_NE(api_best_key(missing), api_best_key(q)) << p;
    EXPECT_NE(api_best_key(missing), api_best_key(empty)) << p;
  }
  // values are delimited: no two splits of the same characters collide
  EXPECT_NE(api_best_key({{"op", "a;1:b"}, {"target", "c"}}), api_best_key({{"op", "a"}, {"target", "b;1:c"}}));
}

namespace {

// A commit to the catalog at `path` by another connection (a new batch).
void commit(const fs::path& path, const std::string& tag) {
  Catalog w = Catalog::open(path);
  NewJob j;
  j.key = "k-" + tag;
  j.op = "add";
  j.dtype = "fp32";
  j.target = "H200";
  j.arch = "sm_90";
  j.shape = nlohmann::json::array({4096});
  j.params = nlohmann::json::object();
  j.spec = nlohmann::json::object();
  w.submit("b-" + tag, "m.yaml", "t", {j});
}

}  // namespace

TEST(AnswerCache, ServesWithinItsStalenessAndRevalidatesAfterCommits) {
  const fs::path d = temp_dir("answers");
  Catalog::open(d / "kiln.db", false, fs::path(KILN_SOURCE_DIR) / "db" / "migrations");
  using Clock = AnswerCache::Clock;
  const auto S = std::chrono::milliseconds(10000);  // longer than this test takes
  AnswerCache cache(d / "kiln.db", S);
  int computed = 0;
  auto compute = [&] {
    Reply r;
    r.body = "answer " + std::to_string(++computed);
    return r;
  };
  EXPECT_FALSE(cache.recent("k", Clock::now()));  // nothing stored yet
  const auto t0 = Clock::now();
  const auto first = cache.answer("k", compute);
  EXPECT_EQ(first.reply.body, "answer 1");
  EXPECT_GE(first.as_of, t0);
  const auto a = cache.answer("k", compute);  // unchanged catalog: no computation, as_of moves on
  EXPECT_EQ(a.reply.body, "answer 1");
  EXPECT_GE(a.as_of, first.as_of);
  EXPECT_EQ(computed, 1);

  // without a catalog read: served while younger than S, asked to refresh once past S/2
  auto r = cache.recent("k", a.as_of + S / 4);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reply.body, "answer 1");
  EXPECT_FALSE(r->refresh);
  r = cache.recent("k", a.as_of + S * 3 / 4);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->refresh);
  EXPECT_FALSE(cache.recent("k", a.as_of + S * 3 / 4)->refresh);  // one refresh at a time
  EXPECT_FALSE(cache.recent("k", a.as_of + S));                   // never past S
  EXPECT_FALSE(cache.recent("other", a.as_of));

  // a commit: recent() still serves the stored answer (bounded staleness);
  // a refresh computes afresh and moves as_of past the commit
  commit(d / "kiln.db", "1");
  const auto committed = Clock::now();
  EXPECT_EQ(cache.recent("k", committed)->reply.body, "answer 1");
  cache.refresh("k", compute);
  EXPECT_EQ(computed, 2);
  r = cache.recent("k", Clock::now());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->reply.body, "answer 2");
  EXPECT_GE(r->as_of, committed);
  EXPECT_TRUE(cache.recent("k", r->as_of + S * 3 / 4)->refresh);  // the flag was cleared

  // a refresh with nothing committed keeps the answer and moves as_of
  const auto before = r->as_of;
  cache.refresh("k", compute);
  EXPECT_EQ(computed, 2);
  EXPECT_GT(cache.recent("k", Clock::now())->as_of, before);

  // answer() is always current: after a commit it computes
  commit(d / "kiln.db", "2");
  EXPECT_EQ(cache.answer("k", compute).reply.body, "answer 3");

  // a failed refresh stores nothing and may be asked for again
  commit(d / "kiln.db", "3");
  const auto as_of = cache.recent("k", Clock::now())->as_of;
  EXPECT_THROW(cache.refresh("k", []() -> Reply { throw std::runtime_error("x"); }), std::runtime_error);
  EXPECT_EQ(cache.recent("k", as_of)->reply.body, "answer 3");
  EXPECT_TRUE(cache.recent("k", as_of + S * 3 / 4)->refresh);

  // S = 0: never served without a check
  AnswerCache exact(d / "kiln.db", Clock::duration::zero());
  exact.answer("k", compute);
  EXPECT_FALSE(exact.recent("k", Clock::now()));
  fs::remove_all(d);
}

TEST(RateLimiter, BucketPerClient) {
  RateLimiter r(3);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(r.allow("a", t0));
  EXPECT_FALSE(r.allow("a", t0));
  EXPECT_TRUE(r.allow("b", t0));  // another client has its own bucket
  EXPECT_TRUE(r.allow("a", t0 + std::chrono::milliseconds(400)));   // 1.2 tokens back
  EXPECT_FALSE(r.allow("a", t0 + std::chrono::milliseconds(400)));
  RateLimiter unlimited(0);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(unlimited.allow("a", t0));
}

TEST(Tar, ListsBackWithTar) {
  const fs::path d = temp_dir("tar");
  fs::create_directories(d / "in" / "objects");
  std::ofstream(d / "in" / "manifest.json") << "{}";
  std::ofstream(d / "in" / "objects" / "k.hsaco") << std::string(1000, 'x');
  std::ofstream(d / "in" / "empty");
  write_tar(d / "in", "kiln-H200", d / "out.tar");
  EXPECT_EQ(fs::file_size(d / "out.tar") % 512, 0u);
  const std::string cmd = "tar -tvf " + (d / "out.tar").string() + " > " + (d / "list").string() + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(d / "list");
  std::string list((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(list.find("kiln-H200/objects/k.hsaco"), std::string::npos) << list;
  EXPECT_NE(list.find(" 1000 "), std::string::npos) << list;
  EXPECT_NE(list.find("kiln-H200/empty"), std::string::npos) << list;
  ASSERT_EQ(std::system(("cd " + d.string() + " && tar -xf out.tar && cmp kiln-H200/objects/k.hsaco in/objects/k.hsaco").c_str()), 0);
  fs::remove_all(d);
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = temp_dir("srv");
    Catalog::open(dir / "kiln.db", false, fs::path(KILN_SOURCE_DIR) / "db" / "migrations");
    knowledge = Knowledge::load(KILN_SOURCE_DIR);
  }
  void TearDown() override { fs::remove_all(dir); }
  ServerOptions options() {
    ServerOptions o;
    o.listen = metrics::parse_listen("127.0.0.1:0", false);
    o.catalog = dir / "kiln.db";
    o.targets = &knowledge.targets;
    o.threads = 2;
    o.cache_dir = dir / "cache";
    return o;
  }
  fs::path dir;
  Knowledge knowledge;
};

TEST_F(ServerTest, RefusesNonLoopbackWithoutToken) {
  ServerOptions o = options();
  o.listen = metrics::parse_listen("0.0.0.0:0", true);
  EXPECT_THROW(Server{o}, std::invalid_argument);
  o.token = "";
  EXPECT_THROW(Server{o}, std::invalid_argument);
  o.catalog = dir / "missing.db";
  o.token = "t";
  EXPECT_THROW(Server{o}, CatalogError);  // opened once up front
}

TEST_F(ServerTest, AnswersOverASocket) {
  ServerOptions o = options();
  o.token = "tok";
  Server s(o);
  std::thread t([&] { s.run(); });
  const auto port = s.port();
  EXPECT_EQ(exchange(port, "GET /api/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").rfind("HTTP/1.1 401", 0), 0u);
  const std::string ok = exchange(port, "GET /api/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_NE(ok.find("\"jobs\": []"), std::string::npos) << ok;
  const std::string m = exchange(port, "GET /metrics HTTP/1.1\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n");
  EXPECT_NE(m.find("kiln_catalog_jobs{state=\"done\"} 0"), std::string::npos) << m;
  const std::string head = exchange(port, "HEAD /healthz HTTP/1.1\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_NE(head.find("Content-Length: 3"), std::string::npos);
  EXPECT_EQ(head.substr(head.size() - 4), "\r\n\r\n");  // no body
  // two requests on one connection (keep-alive)
  const std::string two = exchange(port, "GET /healthz HTTP/1.1\r\nAuthorization: Bearer tok\r\n\r\n"
                                         "GET /healthz HTTP/1.1\r\nAuthorization: Bearer tok\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(count(two, "HTTP/1.1 200"), 2) << two;
  s.stop();
  t.join();
}
