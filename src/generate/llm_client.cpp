#include "generate/llm_client.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <sstream>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

namespace kiln::llm {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---- URLs ------------------------------------------------------------------------

std::string Url::text() const {
  const bool default_port = (scheme == "http" && port == "80") || (scheme == "https" && port == "443");
  return scheme + "://" + host + (default_port ? "" : ":" + port) + prefix;
}

std::optional<Url> parse_url(const std::string& url, std::string* error) {
  auto bad = [&](const std::string& why) -> std::optional<Url> {
    if (error) *error = "bad LLM base URL '" + url + "': " + why;
    return std::nullopt;
  };
  Url u;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    u.scheme = "http";
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    u.scheme = "https";
    rest = url.substr(8);
  } else {
    return bad("it must start with http:// or https://");
  }
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  u.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (authority.find('@') != std::string::npos) return bad("credentials in the URL are not supported; use llm.api_key_env");
  if (!authority.empty() && authority.front() == '[') {  // [::1]:8000
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unterminated IPv6 address");
    u.host = authority.substr(1, close - 1);
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after the IPv6 address");
      u.port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    if (colon != std::string::npos) u.port = authority.substr(colon + 1);
  }
  if (u.host.empty()) return bad("no host");
  if (u.port.empty()) u.port = u.tls() ? "443" : "80";
  if (!std::all_of(u.port.begin(), u.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      u.port.size() > 5 || std::stoi(u.port) == 0 || std::stoi(u.port) > 65535)
    return bad("bad port '" + u.port + "'");
  return u;
}

std::string chat_url(const Url& base) { return base.text() + "/chat/completions"; }

// ---- retry policy ------------------------------------------------------------------

bool retryable_status(int s) { return s == 408 || s == 425 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504; }

std::optional<double> parse_retry_after(std::string_view value, std::time_t now) {
  std::string v(value);
  v.erase(0, v.find_first_not_of(" \t"));
  v.erase(v.find_last_not_of(" \t\r\n") + 1);
  if (v.empty()) return std::nullopt;
  if (std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (v.size() > 9) return std::nullopt;
    return std::stod(v);
  }
  std::tm tm{};
  const char* end = strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (!end) return std::nullopt;
  const std::time_t at = timegm(&tm);
  if (at == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::max(0.0, std::difftime(at, now));
}

double backoff_delay_s(const RetryPolicy& p, int retry, std::optional<double> retry_after_s, double jitter) {
  if (retry_after_s) return std::clamp(*retry_after_s, 0.0, p.retry_after_cap_s);
  const double exp = p.base_s * std::pow(2.0, std::max(0, retry - 1));
  const double capped = std::min(p.cap_s, exp);
  return capped * (0.5 + std::clamp(jitter, 0.0, 1.0) / 2);
}

// ---- replies -------------------------------------------------------------------------

json ChatRequest::body() const {
  json b = {{"model", model}, {"messages", messages}, {"temperature", temperature},
            {"max_tokens", max_tokens}, {"stream", false}};
  if (seed) b["seed"] = *seed;
  return b;
}

ChatResult parse_chat_response(int status, const std::string& body, const std::string& url) {
  ChatResult r;
  r.http_status = status;
  const json j = json::parse(body, nullptr, false);
  auto server_message = [&]() -> std::string {
    if (j.is_object() && j.contains("error")) {
      const json& e = j["error"];
      if (e.is_object() && e.contains("message") && e["message"].is_string()) return e["message"].get<std::string>();
      if (e.is_string()) return e.get<std::string>();
      return e.dump();
    }
    if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
    std::string b = body.substr(0, 300);
    return b;
  };
  if (status < 200 || status >= 300) {
    r.error = "LLM endpoint " + url + " answered HTTP " + std::to_string(status) + ": " + server_message();
    if (status == 401 || status == 403) {
      r.error += " — set KILN_LLM_API_KEY or llm.api_key_env";
      r.endpoint_error = true;
    } else if (status == 404) {
      r.error += " — llm.base_url should end where /chat/completions starts (e.g. http://localhost:8000/v1), "
                 "and llm.model / KILN_LLM_MODEL must name a served model";
      r.endpoint_error = true;
    }
    return r;
  }
  if (!j.is_object()) {
    r.error = "LLM endpoint " + url + " answered with something that is not JSON: " + body.substr(0, 200);
    return r;
  }
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    if (u->contains("prompt_tokens") && (*u)["prompt_tokens"].is_number_integer())
      r.prompt_tokens = (*u)["prompt_tokens"].get<long long>();
    if (u->contains("completion_tokens") && (*u)["completion_tokens"].is_number_integer())
      r.completion_tokens = (*u)["completion_tokens"].get<long long>();
  }
  const json* content = nullptr;
  if (auto c = j.find("choices"); c != j.end() && c->is_array() && !c->empty()) {
    const json& first = (*c)[0];
    if (first.is_object() && first.contains("message") && first["message"].is_object() &&
        first["message"].contains("content"))
      content = &first["message"]["content"];
    else if (first.is_object() && first.contains("text"))
      content = &first["text"];
  }
  if (!content || !content->is_string()) {
    r.error = "LLM endpoint " + url + " answered without choices[0].message.content: " +
              (j.contains("error") ? server_message() : body.substr(0, 200));
    return r;
  }
  r.ok = true;
  r.content = content->get<std::string>();
  return r;
}

// ---- the concurrency cap shared by the run ------------------------------------------------

namespace {

// An io_context service: lives and dies with the io_context, so every client
// of one run shares it.
class Limiter : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit Limiter(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}
  void set_max(int n) { max_ = std::max(1, std::min(max_, n)); }
  void acquire(std::function<void()> fn) {
    if (active_ < max_) {
      ++active_;
      fn();
    } else {
      waiting_.push_back(std::move(fn));
    }
  }
  void release(asio::io_context& io) {
    if (!waiting_.empty()) {
      auto fn = std::move(waiting_.front());
      waiting_.pop_front();
      asio::post(io, std::move(fn));  // the slot passes on
    } else {
      --active_;
    }
  }

 private:
  void shutdown() override { waiting_.clear(); }
  int max_ = 1 << 20, active_ = 0;
  std::deque<std::function<void()>> waiting_;
};

Limiter& limiter_for(asio::io_context& io) { return asio::use_service<Limiter>(io); }

// What one HTTP attempt gives.
struct AttemptResult {
  beast::error_code ec;          // transport error (none when an answer came)
  bool timed_out = false;
  std::string stage;             // resolve | connect | tls | write | read
  int status = 0;
  std::string body;
  std::string retry_after;
};

// One HTTP request over a fresh connection, bounded by a timer.
template <class Stream>
class Attempt : public std::enable_shared_from_this<Attempt<Stream>> {
 public:
  using Done = std::function<void(AttemptResult)>;
  template <class... StreamArgs>
  Attempt(asio::io_context& io, const Url& url, http::request<http::string_body> req, double timeout_s, Done done,
          StreamArgs&&... args)
      : io_(io), url_(url), stream_(std::forward<StreamArgs>(args)...), resolver_(io), timer_(io),
        req_(std::move(req)), timeout_s_(timeout_s), done_(std::move(done)) {}

  void start() {
    auto self = this->shared_from_this();
    timer_.expires_after(std::chrono::milliseconds(static_cast<long long>(timeout_s_ * 1000)));
    timer_.async_wait([self](beast::error_code ec) {
      if (ec || self->finished_) return;
      self->timed_out_ = true;
      self->resolver_.cancel();
      beast::error_code ignore;
      beast::get_lowest_layer(self->stream_).socket().cancel(ignore);
      beast::get_lowest_layer(self->stream_).socket().close(ignore);
    });
    stage_ = "resolve";
    resolver_.async_resolve(url_.host, url_.port, [self](beast::error_code ec, tcp::resolver::results_type r) {
      if (ec) return self->finish(ec);
      self->stage_ = "connect";
      beast::get_lowest_layer(self->stream_).async_connect(
          r, [self](beast::error_code ec, const tcp::endpoint&) {
            if (ec) return self->finish(ec);
            self->after_connect();
          });
    });
  }

 private:
  void after_connect() {
    auto self = this->shared_from_this();
    if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
      stage_ = "tls";
      if (!SSL_set_tlsext_host_name(stream_.native_handle(), url_.host.c_str()))
        return finish(beast::error_code(static_cast<int>(::ERR_get_error()), asio::error::get_ssl_category()));
      stream_.set_verify_mode(asio::ssl::verify_peer);
      stream_.set_verify_callback(asio::ssl::host_name_verification(url_.host));
      stream_.async_handshake(asio::ssl::stream_base::client, [self](beast::error_code ec) {
        if (ec) return self->finish(ec);
        self->send();
      });
    } else {
      send();
    }
  }

  void send() {
    auto self = this->shared_from_this();
    stage_ = "write";
    http::async_write(stream_, req_, [self](beast::error_code ec, std::size_t) {
      if (ec) return self->finish(ec);
      self->stage_ = "read";
      self->parser_.body_limit(64 * 1024 * 1024);
      http::async_read(self->stream_, self->buffer_, self->parser_, [self](beast::error_code ec, std::size_t) {
        if (ec) return self->finish(ec);
        AttemptResult r;
        const auto& res = self->parser_.get();
        r.status = static_cast<int>(res.result_int());
        r.body = res.body();
        if (auto it = res.find(http::field::retry_after); it != res.end()) r.retry_after = std::string(it->value());
        self->finish({}, std::move(r));
      });
    });
  }

  void finish(beast::error_code ec, AttemptResult r = {}) {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    beast::error_code ignore;
    beast::get_lowest_layer(stream_).socket().close(ignore);
    r.ec = ec;
    r.timed_out = timed_out_;
    r.stage = stage_;
    auto done = std::move(done_);
    done(std::move(r));
  }

  asio::io_context& io_;
  Url url_;
  Stream stream_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  http::request<http::string_body> req_;
  http::response_parser<http::string_body> parser_;
  beast::flat_buffer buffer_;
  double timeout_s_;
  Done done_;
  bool finished_ = false, timed_out_ = false;
  std::string stage_;
};

std::string transport_message(const AttemptResult& a, const std::string& url, double timeout_s, int attempts) {
  const std::string hint = " — set KILN_LLM_BASE_URL or llm.base_url";
  const std::string tries = " (" + std::to_string(attempts) + (attempts == 1 ? " attempt)" : " attempts)");
  if (a.timed_out) {
    std::ostringstream t;
    t << timeout_s;
    return "LLM endpoint " + url + " did not answer within " + t.str() + " s" + tries +
           " — is the server up and the model loaded? raise llm.timeout_s, or set KILN_LLM_BASE_URL or llm.base_url";
  }
  if (a.stage == "tls")
    return "TLS handshake with LLM endpoint " + url + " failed: " + a.ec.message() + tries +
           " (the server's certificate is checked against the system's CAs)";
  std::string what = a.ec.message();
  if (a.ec == asio::error::connection_refused) what = "connection refused";
  else if (a.ec == asio::error::host_not_found || a.ec == asio::error::host_not_found_try_again)
    what = "host not found";
  if (a.stage == "resolve" || a.stage == "connect")
    return "cannot reach LLM endpoint " + url + ": " + what + tries + hint;
  return "LLM endpoint " + url + " dropped the connection (" + a.stage + ": " + what + ")" + tries + hint;
}

}  // namespace

// ---- the client ------------------------------------------------------------------------------

struct Client::Impl {
  Url url;
  std::string url_error;
  asio::ssl::context ssl{asio::ssl::context::tls_client};
};

Client::Client(asio::io_context& io, ClientSettings settings)
    : io_(io), settings_(std::move(settings)), impl_(std::make_unique<Impl>()) {
  policy.max_retries = std::max(0, settings_.max_retries);
  if (auto u = parse_url(settings_.base_url, &impl_->url_error)) impl_->url = *u;
  if (impl_->url.tls()) {
    beast::error_code ec;
    impl_->ssl.set_default_verify_paths(ec);
    impl_->ssl.set_verify_mode(asio::ssl::verify_peer);
  }
  jitter = [] {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return std::uniform_real_distribution<double>(0, 1)(rng);
  };
  limiter_for(io_).set_max(settings_.max_concurrent);
}

Client::~Client() = default;

std::shared_ptr<Client> Client::create(asio::io_context& io, ClientSettings settings) {
  return std::shared_ptr<Client>(new Client(io, std::move(settings)));
}

std::string Client::url() const { return impl_->url_error.empty() ? chat_url(impl_->url) : settings_.base_url; }

void Client::chat(const ChatRequest& request, double deadline_s, Done done) {
  if (!impl_->url_error.empty()) {
    ChatResult r;
    r.error = impl_->url_error + " — set KILN_LLM_BASE_URL or llm.base_url";
    r.endpoint_error = true;
    asio::post(io_, [done = std::move(done), r]() { done(r); });
    return;
  }
  struct Call {
    ChatRequest req;
    Done done;
    Clock::time_point start, deadline;
    bool has_deadline = false;
    int attempts = 0;
    std::shared_ptr<asio::steady_timer> backoff;
  };
  auto call = std::make_shared<Call>();
  call->req = request;
  call->done = std::move(done);
  call->has_deadline = deadline_s > 0;
  auto self = shared_from_this();
  limiter_for(io_).acquire([self, call, deadline_s]() {
    call->start = Clock::now();
    if (call->has_deadline)
      call->deadline = call->start + std::chrono::milliseconds(static_cast<long long>(deadline_s * 1000));
    auto attempt_fn = std::make_shared<std::function<void()>>();
    std::weak_ptr<std::function<void()>> weak_fn = attempt_fn;
    *attempt_fn = [self, call, weak_fn]() {
      auto again = weak_fn.lock();
      const Url& u = self->impl_->url;
      const std::string url = chat_url(u);
      double timeout = self->settings_.timeout_s;
      if (call->has_deadline)
        timeout = std::min(timeout, std::chrono::duration<double>(call->deadline - Clock::now()).count());
      timeout = std::max(timeout, 0.05);
      ++call->attempts;
      http::request<http::string_body> req{http::verb::post, u.prefix + "/chat/completions", 11};
      const bool default_port = (u.scheme == "http" && u.port == "80") || (u.scheme == "https" && u.port == "443");
      const bool v6 = u.host.find(':') != std::string::npos;
      req.set(http::field::host, (v6 ? "[" + u.host + "]" : u.host) + (default_port ? "" : ":" + u.port));
      req.set(http::field::user_agent, "kiln");
      req.set(http::field::content_type, "application/json");
      req.set(http::field::accept, "application/json");
      req.set(http::field::connection, "close");
      if (!self->settings_.api_key.empty()) req.set(http::field::authorization, "Bearer " + self->settings_.api_key);
      req.body() = call->req.body().dump();
      req.prepare_payload();

      auto on_attempt = [self, call, again, url, timeout](AttemptResult a) {
        const bool transport_failed = a.timed_out || a.ec;
        ChatResult r;
        if (transport_failed) {
          r.error = transport_message(a, url, timeout, call->attempts);
          r.endpoint_error = true;
        } else {
          r = parse_chat_response(a.status, a.body, url);
        }
        r.attempts = call->attempts;
        // A certificate that does not verify will not verify on the next try either.
        const bool tls_refused = a.ec && !a.timed_out && a.stage == "tls";
        const bool retry_worthy = (transport_failed && !tls_refused) || retryable_status(a.status);
        const int retries_done = call->attempts - 1;
        std::optional<double> retry_after;
        if (!a.retry_after.empty()) retry_after = parse_retry_after(a.retry_after, std::time(nullptr));
        const double delay = backoff_delay_s(self->policy, retries_done + 1, retry_after, self->jitter());
        bool time_left = true;
        if (call->has_deadline)
          time_left = Clock::now() + std::chrono::milliseconds(static_cast<long long>(delay * 1000) + 50) < call->deadline;
        if (!r.ok && retry_worthy && retries_done < self->policy.max_retries && time_left && again) {
          call->backoff = std::make_shared<asio::steady_timer>(self->io_);
          call->backoff->expires_after(std::chrono::milliseconds(static_cast<long long>(delay * 1000)));
          call->backoff->async_wait([again](beast::error_code) { (*again)(); });
          return;
        }
        if (!r.ok && retry_worthy && !transport_failed) {
          r.error += " (after " + std::to_string(call->attempts) + " attempts)";
          r.endpoint_error = true;
        }
        r.latency_s = std::chrono::duration<double>(Clock::now() - call->start).count();
        limiter_for(self->io_).release(self->io_);
        auto done = std::move(call->done);
        done(std::move(r));
      };
      if (u.tls()) {
        auto a = std::make_shared<Attempt<beast::ssl_stream<beast::tcp_stream>>>(
            self->io_, u, std::move(req), timeout, on_attempt, self->io_, self->impl_->ssl);
        a->start();
      } else {
        auto a = std::make_shared<Attempt<beast::tcp_stream>>(self->io_, u, std::move(req), timeout, on_attempt,
                                                              self->io_);
        a->start();
      }
    };
    // The attempt function holds itself only weakly; the pending I/O (its
    // completion handler holds `again`) and the backoff timer keep it alive.
    (*attempt_fn)();
  });
}

}  // namespace kiln::llm
