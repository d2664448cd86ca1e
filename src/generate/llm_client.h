// An OpenAI-compatible chat-completions client (POST {base_url}/chat/completions)
// on Boost.Beast over the caller's io_context: http:// for a local vLLM or
// SGLang server, https:// through OpenSSL (SNI, peer verified against the
// system's CAs). Per-request timeouts, retries with exponential backoff on
// connection failures, timeouts, 429 and 5xx (Retry-After honoured), and a cap
// on requests in flight shared by every client of the same io_context.
// docs/llm.md.
#pragma once
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

namespace kiln::llm {

// "http://host:port/prefix" split up. port defaults to 80 / 443.
struct Url {
  std::string scheme, host, port, prefix;  // prefix without a trailing '/', e.g. "/v1"
  bool tls() const { return scheme == "https"; }
  std::string text() const;                // scheme://host[:port]prefix
};
// nullopt (and *error set) for anything that is not http(s)://host[:port][/path].
std::optional<Url> parse_url(const std::string& url, std::string* error = nullptr);

// ---- retry policy (pure) ------------------------------------------------------

struct RetryPolicy {
  int max_retries = 3;          // retries after the first request
  double base_s = 1.0;          // first backoff
  double cap_s = 30.0;          // largest backoff
  double retry_after_cap_s = 120.0;  // longest Retry-After honoured
};

// HTTP statuses worth retrying: 408, 425, 429, 500, 502, 503, 504.
bool retryable_status(int status);
// Retry-After: delta-seconds or an HTTP-date (relative to `now`); nullopt if unparsable.
std::optional<double> parse_retry_after(std::string_view value, std::time_t now);
// Delay before retry number `retry` (1 = the first retry): base * 2^(retry-1)
// capped at cap_s, scaled by (0.5 + jitter / 2) with jitter in [0, 1); a
// Retry-After, when given, replaces it (capped at retry_after_cap_s).
double backoff_delay_s(const RetryPolicy& p, int retry, std::optional<double> retry_after_s, double jitter);

// ---- requests and replies --------------------------------------------------------

struct ClientSettings {
  std::string base_url;         // ..../v1
  std::string api_key;          // "" = no Authorization header
  double timeout_s = 120;       // per HTTP request
  int max_retries = 3;
  int max_concurrent = 4;       // across every client on the io_context (the smallest asked wins)
};

struct ChatRequest {
  std::string model;
  nlohmann::json messages = nlohmann::json::array();
  double temperature = 0.2;
  int max_tokens = 4096;
  std::optional<long long> seed;
  nlohmann::json body() const;  // the JSON request body
};

struct ChatResult {
  bool ok = false;
  std::string content;          // choices[0].message.content
  std::optional<long long> prompt_tokens, completion_tokens;
  double latency_s = 0;         // first request to last answer, backoff included
  int attempts = 0;             // HTTP requests made
  int http_status = 0;          // of the last answer; 0 when none came
  std::string error;            // the message (names the URL)
  bool endpoint_error = false;  // unreachable, no answer, TLS, 401/403/404: the endpoint is unusable
};

// Parses an HTTP answer of /chat/completions (pure): ok with the content and
// usage, or an error naming the status and the server's error message.
ChatResult parse_chat_response(int http_status, const std::string& body, const std::string& url);

// The full request URL for a base URL.
std::string chat_url(const Url& base);

class Client : public std::enable_shared_from_this<Client> {
 public:
  using Done = std::function<void(ChatResult)>;
  static std::shared_ptr<Client> create(boost::asio::io_context& io, ClientSettings settings);
  ~Client();
  // Sends the request (retrying as the policy says) and calls done once, on the
  // io_context. deadline_s > 0 bounds the whole call (retries stop early and a
  // request's timeout shrinks to what is left).
  void chat(const ChatRequest& request, double deadline_s, Done done);
  const ClientSettings& settings() const { return settings_; }
  std::string url() const;      // the chat-completions URL

  // Tests: the policy and the jitter source.
  RetryPolicy policy;
  std::function<double()> jitter;

 private:
  Client(boost::asio::io_context& io, ClientSettings settings);
  struct Impl;
  boost::asio::io_context& io_;
  ClientSettings settings_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::llm
