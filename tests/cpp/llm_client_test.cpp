// The chat-completions client: URL parsing, the retry/backoff policy and reply
// parsing (pure functions), then real requests to an in-process HTTP server on
// loopback: success, retries on 503 with Retry-After, no retry on 400, 401,
// connection refused, an endpoint that never answers, and the concurrency cap.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include <boost/asio.hpp>

#include "generate/llm_client.h"

namespace asio = boost::asio;
using asio::ip::tcp;
using nlohmann::json;

namespace kiln::llm {
namespace {

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// ---- pure functions ---------------------------------------------------------------

TEST(Url, Parses) {
  auto u = parse_url("http://localhost:8000/v1");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "http");
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->prefix, "/v1");
  EXPECT_EQ(chat_url(*u), "http://localhost:8000/v1/chat/completions");
  auto s = parse_url("https://api.example.com/v1/");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->tls());
  EXPECT_EQ(s->port, "443");
  EXPECT_EQ(s->prefix, "/v1");
  EXPECT_EQ(s->text(), "https://api.example.com/v1");
  auto v6 = parse_url("http://[::1]:9000");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "9000");
  EXPECT_EQ(v6->prefix, "");
  std::string err;
  EXPECT_FALSE(parse_url("ftp://x/v1", &err));
  EXPECT_TRUE(has(err, "http:// or https://"));
  EXPECT_FALSE(parse_url("http://:80/v1", &err));
  EXPECT_FALSE(parse_url("http://host:99999/v1", &err));
  EXPECT_FALSE(parse_url("http://user:pw@host/v1", &err));
  EXPECT_TRUE(has(err, "api_key_env"));
}

TEST(RetryPolicy, RetryableStatuses) {
  for (int s : {408, 425, 429, 500, 502, 503, 504}) EXPECT_TRUE(retryable_status(s)) << s;
  for (int s : {200, 400, 401, 403, 404, 422}) EXPECT_FALSE(retryable_status(s)) << s;
}

TEST(RetryPolicy, ExponentialBackoffWithJitterAndCap) {
  RetryPolicy p;
  p.base_s = 1;
  p.cap_s = 30;
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 1, std::nullopt, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 2, std::nullopt, 1.0), 2.0);
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 3, std::nullopt, 1.0), 4.0);
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 4, std::nullopt, 0.0), 4.0);   // jitter 0 halves
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 10, std::nullopt, 1.0), 30.0); // capped
  for (double j : {0.0, 0.3, 0.99}) {
    const double d = backoff_delay_s(p, 3, std::nullopt, j);
    EXPECT_GE(d, 2.0);
    EXPECT_LE(d, 4.0);
  }
}

TEST(RetryPolicy, RetryAfterIsHonouredAndCapped) {
  RetryPolicy p;
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 1, 7.0, 0.5), 7.0);
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 5, 0.0, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(backoff_delay_s(p, 1, 100000.0, 0.5), p.retry_after_cap_s);
  EXPECT_EQ(parse_retry_after("12", 0), 12.0);
  EXPECT_EQ(parse_retry_after(" 3 ", 0), 3.0);
  // An HTTP-date, relative to now.
  const std::time_t now = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:50:37 GMT", now), 60.0);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:40:37 GMT", now), 0.0);  // in the past
  EXPECT_FALSE(parse_retry_after("soon", now));
  EXPECT_FALSE(parse_retry_after("", now));
}

TEST(Reply, ParsesContentAndUsage) {
  const std::string body = R"({"choices":[{"message":{"role":"assistant","content":"```python\nx=1\n```"}}],
                               "usage":{"prompt_tokens":120,"completion_tokens":34}})";
  ChatResult r = parse_chat_response(200, body, "http://h/v1/chat/completions");
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.content, "```python\nx=1\n```");
  EXPECT_EQ(r.prompt_tokens, 120);
  EXPECT_EQ(r.completion_tokens, 34);
  ChatResult no_usage = parse_chat_response(200, R"({"choices":[{"message":{"content":"hi"}}]})", "u");
  EXPECT_TRUE(no_usage.ok);
  EXPECT_FALSE(no_usage.prompt_tokens);
}

TEST(Reply, Errors) {
  ChatResult e = parse_chat_response(400, R"({"error":{"message":"context too long"}})", "http://h/v1/chat/completions");
  EXPECT_FALSE(e.ok);
  EXPECT_TRUE(has(e.error, "http://h/v1/chat/completions answered HTTP 400: context too long"));
  EXPECT_FALSE(e.endpoint_error);
  ChatResult auth = parse_chat_response(401, R"({"error":"bad key"})", "u");
  EXPECT_TRUE(auth.endpoint_error);
  EXPECT_TRUE(has(auth.error, "KILN_LLM_API_KEY"));
  ChatResult nf = parse_chat_response(404, "Not Found", "u");
  EXPECT_TRUE(nf.endpoint_error);
  EXPECT_TRUE(has(nf.error, "/v1"));
  EXPECT_FALSE(parse_chat_response(200, "not json", "u").ok);
  EXPECT_FALSE(parse_chat_response(200, R"({"choices":[]})", "u").ok);
  EXPECT_FALSE(parse_chat_response(200, R"({"choices":[{"message":{"content":null}}]})", "u").ok);
}

TEST(Request, Body) {
  ChatRequest r;
  r.model = "m";
  r.messages = json::array({{{"role", "user"}, {"content", "hi"}}});
  r.temperature = 0.3;
  r.max_tokens = 100;
  json b = r.body();
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["max_tokens"], 100);
  EXPECT_EQ(b["stream"], false);
  EXPECT_FALSE(b.contains("seed"));
  r.seed = 7;
  EXPECT_EQ(r.body()["seed"], 7);
}

// ---- against a loopback server ------------------------------------------------------------

std::string http_response(int status, const std::string& body, const std::string& extra = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n" + extra + "Connection: close\r\n\r\n" + body;
}

std::string ok_body(const std::string& content) {
  return json{{"choices", {{{"message", {{"role", "assistant"}, {"content", content}}}}}},
              {"usage", {{"prompt_tokens", 10}, {"completion_tokens", 5}}}}
      .dump();
}

// Answers one connection per scripted response ("" = read the request, never answer).
class FakeServer {
 public:
  explicit FakeServer(std::vector<std::string> responses) : responses_(std::move(responses)) {
    acceptor_.open(tcp::v4());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    // Wake an accept() still waiting for a connection that will never come.
    boost::system::error_code ec;
    asio::io_context io;
    tcp::socket wake(io);
    wake.connect({asio::ip::make_address("127.0.0.1"), port_}, ec);
    wake.close(ec);
    if (thread_.joinable()) thread_.join();
    acceptor_.close(ec);
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/v1"; }
  std::vector<std::string> requests;
  std::atomic<bool> overlapped{false};  // a second connection arrived while one was unanswered

 private:
  void serve() {
    for (size_t i = 0; i < responses_.size() && !stop_; ++i) {
      tcp::socket s(io_);
      boost::system::error_code ec;
      acceptor_.accept(s, ec);
      if (ec || stop_) return;
      requests.push_back(read_request(s));
      // Is another client connecting while this one waits for its answer?
      acceptor_.non_blocking(true, ec);
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      tcp::socket probe(io_);
      acceptor_.accept(probe, ec);
      if (!ec) {
        overlapped = true;
        pending_.push_back(std::move(probe));
      }
      acceptor_.non_blocking(false, ec);
      if (responses_[i].empty()) {
        held_.push_back(std::move(s));
        continue;
      }
      asio::write(s, asio::buffer(responses_[i]), ec);
      s.shutdown(tcp::socket::shutdown_both, ec);
    }
  }
  static std::string read_request(tcp::socket& s) {
    std::string data;
    char buf[4096];
    boost::system::error_code ec;
    for (;;) {
      const size_t hdr = data.find("\r\n\r\n");
      if (hdr != std::string::npos) {
        size_t len = 0;
        const size_t cl = data.find("Content-Length: ");
        if (cl != std::string::npos) len = std::stoul(data.substr(cl + 16));
        if (data.size() >= hdr + 4 + len) return data;
      }
      size_t n = s.read_some(asio::buffer(buf), ec);
      if (ec) return data;
      data.append(buf, n);
    }
  }
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
  unsigned short port_ = 0;
  std::vector<std::string> responses_;
  std::vector<tcp::socket> held_, pending_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

ChatRequest request() {
  ChatRequest r;
  r.model = "test-model";
  r.messages = json::array({{{"role", "user"}, {"content", "write a kernel"}}});
  r.seed = 3;
  return r;
}

// Runs one chat on a fresh io_context and returns its result.
ChatResult chat(ClientSettings s, double base_s = 0.01, double deadline_s = 0) {
  asio::io_context io;
  auto c = Client::create(io, s);
  c->policy.base_s = base_s;
  c->jitter = [] { return 1.0; };
  std::optional<ChatResult> out;
  c->chat(request(), deadline_s, [&](ChatResult r) { out = r; });
  io.run();
  EXPECT_TRUE(out.has_value());
  return out.value_or(ChatResult{});
}

TEST(Client, Success) {
  FakeServer server({http_response(200, ok_body("```python\nimport triton\n```"))});
  ChatResult r = chat({.base_url = server.base_url(), .api_key = "sekret"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.content, "```python\nimport triton\n```");
  EXPECT_EQ(r.prompt_tokens, 10);
  EXPECT_EQ(r.completion_tokens, 5);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_GE(r.latency_s, 0.0);
  ASSERT_EQ(server.requests.size(), 1u);
  const std::string& req = server.requests[0];
  EXPECT_TRUE(has(req, "POST /v1/chat/completions HTTP/1.1\r\n"));
  EXPECT_TRUE(has(req, "Authorization: Bearer sekret\r\n"));
  EXPECT_TRUE(has(req, "Content-Type: application/json\r\n"));
  const json body = json::parse(req.substr(req.find("\r\n\r\n") + 4));
  EXPECT_EQ(body["model"], "test-model");
  EXPECT_EQ(body["seed"], 3);
  EXPECT_EQ(body["messages"][0]["content"], "write a kernel");
}

TEST(Client, RetriesOn503HonouringRetryAfter) {
  FakeServer server({http_response(503, R"({"error":{"message":"busy"}})", "Retry-After: 0\r\n"),
                     http_response(429, R"({"error":{"message":"slow down"}})"),
                     http_response(200, ok_body("done"))});
  ChatResult r = chat({.base_url = server.base_url(), .max_retries = 3});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.content, "done");
  EXPECT_EQ(r.attempts, 3);
  EXPECT_EQ(server.requests.size(), 3u);
}

TEST(Client, GivesUpAfterMaxRetries) {
  FakeServer server({http_response(503, "{}"), http_response(503, "{}")});
  ChatResult r = chat({.base_url = server.base_url(), .max_retries = 1});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_TRUE(has(r.error, "HTTP 503"));
  EXPECT_TRUE(has(r.error, "after 2 attempts"));
  EXPECT_TRUE(r.endpoint_error);
}

TEST(Client, NoRetryOnBadRequest) {
  FakeServer server({http_response(400, R"({"error":{"message":"prompt too long"}})")});
  ChatResult r = chat({.base_url = server.base_url(), .max_retries = 3});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(has(r.error, "prompt too long"));
  EXPECT_FALSE(r.endpoint_error);
}

TEST(Client, UnauthorizedIsAnEndpointError) {
  FakeServer server({http_response(401, R"({"error":{"message":"invalid api key"}})")});
  ChatResult r = chat({.base_url = server.base_url()});
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.endpoint_error);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_TRUE(has(r.error, "KILN_LLM_API_KEY"));
}

unsigned short closed_port() {
  asio::io_context io;
  tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  const unsigned short port = a.local_endpoint().port();
  a.close();
  return port;
}

TEST(Client, ConnectionRefusedNamesTheUrl) {
  ClientSettings s;
  s.base_url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/v1";
  s.max_retries = 2;
  ChatResult r = chat(s);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.endpoint_error);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_TRUE(has(r.error, "cannot reach LLM endpoint " + s.base_url + "/chat/completions: connection refused"))
      << r.error;
  EXPECT_TRUE(has(r.error, "set KILN_LLM_BASE_URL or llm.base_url"));
}

TEST(Client, HungEndpointTimesOutAndRetries) {
  FakeServer server({"", ""});
  ClientSettings s;
  s.base_url = server.base_url();
  s.timeout_s = 0.4;
  s.max_retries = 1;
  const auto t0 = std::chrono::steady_clock::now();
  ChatResult r = chat(s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.endpoint_error);
  EXPECT_EQ(r.attempts, 2);
  EXPECT_TRUE(has(r.error, "LLM endpoint " + s.base_url + "/chat/completions did not answer within 0.4 s (2 attempts)"))
      << r.error;
  EXPECT_GE(took, 0.8);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(server.requests.size(), 2u);
}

TEST(Client, DeadlineBoundsTheWholeCall) {
  FakeServer server({""});
  ClientSettings s;
  s.base_url = server.base_url();
  s.timeout_s = 30;
  s.max_retries = 5;
  const auto t0 = std::chrono::steady_clock::now();
  ChatResult r = chat(s, 0.01, /*deadline_s=*/0.5);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(r.ok);
  EXPECT_LT(took, 3.0);
  EXPECT_EQ(r.attempts, 1);  // no time left for a retry
}

TEST(Client, ConcurrencyCapAcrossClients) {
  FakeServer server({http_response(200, ok_body("a")), http_response(200, ok_body("b"))});
  asio::io_context io;
  ClientSettings s;
  s.base_url = server.base_url();
  s.max_concurrent = 1;
  auto c1 = Client::create(io, s);
  auto c2 = Client::create(io, s);  // another job's client: the cap is shared
  int done = 0;
  c1->chat(request(), 0, [&](ChatResult r) { EXPECT_TRUE(r.ok) << r.error; ++done; });
  c2->chat(request(), 0, [&](ChatResult r) { EXPECT_TRUE(r.ok) << r.error; ++done; });
  io.run();
  EXPECT_EQ(done, 2);
  EXPECT_FALSE(server.overlapped);  // the second request waited for the first
}

TEST(Client, BadBaseUrl) {
  ClientSettings s;
  s.base_url = "localhost:8000";
  ChatResult r = chat(s);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.endpoint_error);
  EXPECT_TRUE(has(r.error, "bad LLM base URL"));
}

}  // namespace
}  // namespace kiln::llm
