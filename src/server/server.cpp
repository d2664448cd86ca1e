#include "server/server.h"

#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <fstream>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "catalog/catalog.h"
#include "catalog/service_reads.h"
#include "metrics/exposition.h"
#include "server/answer_cache.h"
#include "server/api.h"
#include "server/catalog_metrics.h"
#include "server/dashboard.h"
#include "server/rate_limit.h"
#include "server/tar.h"

namespace kiln::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;

namespace {

std::string endpoint_text(const asio::ip::address& a, unsigned short port) {
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(port);
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

Params parse_query(std::string_view q) {
  Params out;
  while (!q.empty() && out.size() < 32) {
    const size_t amp = q.find('&');
    const std::string_view pair = q.substr(0, amp);
    const size_t eq = pair.find('=');
    out[percent_decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : percent_decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    q = q.substr(amp + 1);
  }
  return out;
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(1, b.size())]);
  return diff == 0;
}

// Read-only catalog connections with their prepared reads, one per handler
// thread at a time.
class CatalogPool {
 public:
  explicit CatalogPool(fs::path path) : path_(std::move(path)) { put(open()); }
  std::unique_ptr<reports::Reader> take() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        auto c = std::move(free_.back());
        free_.pop_back();
        return c;
      }
    }
    return open();
  }
  void put(std::unique_ptr<reports::Reader> c) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(c));
  }
  const fs::path& path() const { return path_; }

 private:
  std::unique_ptr<reports::Reader> open() const { return std::make_unique<reports::Reader>(Catalog::open(path_, true)); }
  fs::path path_;
  std::mutex mu_;
  std::vector<std::unique_ptr<reports::Reader>> free_;
};

}  // namespace

struct Server::Impl {
  explicit Impl(ServerOptions o)
      : opts(std::move(o)),
        pool(opts.catalog),
        answers(opts.catalog, opts.best_max_staleness),
        limiter(opts.rate_per_s),
        acceptor(io),
        signals(io),
        handlers(opts.threads) {}

  ServerOptions opts;
  CatalogPool pool;
  // /api/best answers with bounded staleness (a burst costs at most one query)
  AnswerCache answers;
  Facts facts;
  RateLimiter limiter;
  std::atomic<int> live{0};
  // /metrics rendered at most once per kMetricsMaxAge: every job's gauges cost
  // milliseconds of CPU, and a burst of scrapes would each pay it. Requests
  // that arrive while one renders wait for it (one render serves them all).
  static constexpr std::chrono::milliseconds kMetricsMaxAge{1000};
  std::mutex metrics_mu;  // guards the two below
  std::chrono::steady_clock::time_point metrics_at{};
  std::string metrics_body;
  std::mutex build_mu;  // one package build at a time; guards `built`
  // The package tars this process built, by target. Only these are served
  // from the cache and only these are evicted: a file of the same name in the
  // cache directory that this process did not write (a previous server's, or
  // anyone's) is neither trusted nor deleted.
  std::map<std::string, fs::path> built;
  // In the names of the tars this process builds, so that none is ever a file
  // someone else put in the cache directory.
  const std::string instance_tag = [] {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
    return std::string(buf);
  }();
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::signal_set signals;
  asio::thread_pool handlers;
  std::string bound;
  unsigned short port = 0;

  std::mutex log_mu;  // serialises lines on the shared stream
  void log(const std::string& line) {
    if (!opts.log) return;
    std::lock_guard<std::mutex> lock(log_mu);
    *opts.log << "kiln serve: " << line << std::endl;
  }

  Reply package(reports::Reader& reader, const std::string& name);
  Reply route(const std::string& path, const Params& q);
  // GET /api/best's reply with its staleness headers.
  Reply best_reply(AnswerCache::Answer a) const;
  // Revalidates the cached /api/best answer to `q` on a handler thread.
  void refresh_best(std::string key, Params q);
  void accept();
};

namespace {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server) : stream_(std::move(socket)), server_(server) {
    ++server_.live;
    beast::error_code ec;
    const auto ep = stream_.socket().remote_endpoint(ec);
    client_ = ec ? "?" : ep.address().to_string();
  }
  ~Session() { --server_.live; }

  void start() { read(); }

 private:
  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.opts.max_header_bytes));
    parser_->body_limit(server_.opts.max_body_bytes);
    stream_.expires_after(std::chrono::milliseconds(static_cast<long long>(server_.opts.request_timeout_s * 1000)));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) return answer_now(431, "request headers too large (limit " + std::to_string(server_.opts.max_header_bytes) + " bytes)", 11);
    if (ec == http::error::body_limit) return answer_now(413, "request body too large (limit " + std::to_string(server_.opts.max_body_bytes) + " bytes)", 11);
    if (ec) return close();
    const auto& req = parser_->get();
    version_ = req.version();
    keep_alive_ = req.keep_alive();
    head_ = req.method() == http::verb::head;
    if (!server_.limiter.allow(client_)) {
      Reply r = error_reply(429, "too many requests from " + client_ + " (limit " +
                                     std::to_string(static_cast<long long>(server_.opts.rate_per_s)) + "/s)");
      r.headers.push_back({"Retry-After", "1"});
      return write(std::move(r));
    }
    if (server_.opts.token) {
      const auto auth = req[http::field::authorization];
      const std::string_view want = "Bearer ";
      const bool ok = auth.size() > want.size() && std::string_view(auth.data(), want.size()) == want &&
                      constant_time_equal(std::string_view(auth.data() + want.size(), auth.size() - want.size()),
                                          *server_.opts.token);
      if (!ok) {
        Reply r = error_reply(401, "unauthorized: send Authorization: Bearer <token> (kiln serve --token-file)");
        r.headers.push_back({"WWW-Authenticate", "Bearer realm=\"kiln\""});
        return write(std::move(r));
      }
    }
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      Reply r = error_reply(405, "only GET and HEAD");
      r.headers.push_back({"Allow", "GET, HEAD"});
      return write(std::move(r));
    }
    const std::string target(req.target());
    const size_t qm = target.find('?');
    const std::string path = target.substr(0, qm);
    const Params q = qm == std::string::npos ? Params{} : parse_query(std::string_view(target).substr(qm + 1));
    if (path == "/api/best") {  // a recent cached answer is sent from this thread, without a catalog read
      std::string key = api_best_key(q);
      if (auto hit = server_.answers.recent(key, AnswerCache::Clock::now())) {
        if (hit->refresh) server_.refresh_best(std::move(key), q);
        return write(server_.best_reply(std::move(*hit)));
      }
    }
    asio::post(server_.handlers, [self = shared_from_this(), path, q] {
      Reply r = self->server_.route(path, q);
      asio::post(self->stream_.get_executor(), [self, r = std::move(r)]() mutable { self->write(std::move(r)); });
    });
  }

  // Answers before the request was read whole (too large): then closes.
  void answer_now(int status, const std::string& message, unsigned version) {
    version_ = version;
    keep_alive_ = false;
    head_ = false;
    unread_input_ = true;
    write(error_reply(status, message));
  }

  void write(Reply r) {
    res_ = {};
    res_.version(version_);
    res_.result(static_cast<http::status>(r.status));
    res_.set(http::field::server, "kiln");
    res_.set(http::field::content_type, r.content_type);
    res_.set(http::field::cache_control, "no-store");
    res_.set("X-Content-Type-Options", "nosniff");
    for (const auto& [k, v] : r.headers) res_.set(k, v);
    res_.body() = std::move(r.body);
    res_.keep_alive(keep_alive_ && r.status < 400);
    res_.prepare_payload();
    if (head_) res_.body().clear();  // Content-Length stays the GET's
    stream_.expires_after(std::chrono::seconds(60));
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec && self->unread_input_) return self->linger_close();
      if (ec || !self->res_.keep_alive()) return self->close();
      self->read();
    });
  }

  // After an answer to a request not read whole: stop sending, read and drop
  // what the client still sends (at most 1 MiB, 2 s), then close -- closing
  // with unread input would reset the connection before the client reads the answer.
  void linger_close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain();
  }
  void drain() {
    stream_.async_read_some(asio::buffer(scratch_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (1u << 20)) return self->close();
      self->drain();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  Server::Impl& server_;
  std::string client_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> res_;
  unsigned version_ = 11;
  bool keep_alive_ = false, head_ = false, unread_input_ = false;
  std::array<char, 16384> scratch_{};
  std::size_t drained_ = 0;
};

}  // namespace

Reply Server::Impl::route(const std::string& path, const Params& q) {
  std::unique_ptr<reports::Reader> cat;
  try {
    cat = pool.take();
    Reply r;
    if (path == "/" || path == "/index.html") {
      if (auto unknown = unknown_batch(*cat, q)) return *unknown;
      DashboardOptions d;
      d.source = opts.catalog.string();
      d.generated_at = utc_now_text();
      d.served = true;
      if (auto it = q.find("batch"); it != q.end() && !it->second.empty()) d.batch_id = it->second;
      r.content_type = "text/html; charset=utf-8";
      r.body = render_dashboard(*cat, *opts.targets, facts, d);
    } else if (path == "/metrics") {
      r.content_type = metrics::kContentType;
      std::lock_guard<std::mutex> lock(metrics_mu);
      const auto now = std::chrono::steady_clock::now();
      if (metrics_body.empty() || now - metrics_at >= kMetricsMaxAge) {
        metrics_body = render_catalog_metrics(*cat, facts);
        metrics_at = std::chrono::steady_clock::now();
      }
      r.body = metrics_body;
    } else if (path == "/api/best") {
      r = best_reply(answers.answer(api_best_key(q), [&] { return api_best(*cat, *opts.targets, facts, q); }));
    } else if (path == "/api/jobs" || path == "/api/jobs/") {
      r = api_jobs(*cat, q);
    } else if (path.rfind("/api/jobs/", 0) == 0) {
      r = api_job(*cat, facts, path.substr(10));
    } else if (path.rfind("/api/code-objects/", 0) == 0) {
      r = api_code_object(*cat, path.substr(18));
    } else if (path.rfind("/api/packages/", 0) == 0) {
      r = package(*cat, path.substr(14));
    } else if (path == "/healthz") {
      r.content_type = "text/plain; charset=utf-8";
      r.body = "ok\n";
    } else {
      r = error_reply(404, "no such path: " + path +
                               " (/, /api/best, /api/jobs, /api/jobs/{id}, /api/packages/{target}, /metrics)");
    }
    pool.put(std::move(cat));
    return r;
  } catch (const std::exception& e) {
    log(std::string("500 on ") + path + ": " + e.what());
    return error_reply(500, e.what());  // the connection is dropped with `cat`: a broken one is not reused
  }
}

Reply Server::Impl::best_reply(AnswerCache::Answer a) const {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const auto age = AnswerCache::Clock::now() - a.as_of;
  a.reply.headers.push_back({"X-Kiln-Staleness-Ms", std::to_string(duration_cast<milliseconds>(age).count())});
  a.reply.headers.push_back(
      {"X-Kiln-Max-Staleness-Ms", std::to_string(duration_cast<milliseconds>(answers.max_staleness()).count())});
  return std::move(a.reply);
}

void Server::Impl::refresh_best(std::string key, Params q) {
  asio::post(handlers, [this, key = std::move(key), q = std::move(q)] {
    try {
      answers.refresh(key, [&] {
        auto cat = pool.take();
        Reply r = api_best(*cat, *opts.targets, facts, q);
        pool.put(std::move(cat));  // not on an exception: a broken connection is not reused
        return r;
      });
    } catch (const std::exception& e) {
      log(std::string("refreshing a cached /api/best answer: ") + e.what());
    }
  });
}

Reply Server::Impl::package(reports::Reader& reader, const std::string& name) {
  const Target* t = opts.targets->find(name);
  if (!t) return error_reply(404, "unknown target '" + name + "'");
  if (!opts.build_package) return error_reply(501, "this server builds no packages");
  reports::BestFilter f;
  f.target = t->name;
  if (reports::best_kernels(reader, f).empty())
    return error_reply(404, "no finished job with a best kernel for " + t->name + " in the catalog");
  const std::string fp = reports::best_fingerprint(reader, t->name).substr(0, 16);
  const fs::path cached = opts.cache_dir / (t->name + "-" + fp + "-" + instance_tag + ".tar");
  std::string how = "cached";
  std::ifstream in;
  {
    std::lock_guard<std::mutex> lock(build_mu);
    const auto mine = built.find(t->name);
    if (mine == built.end() || mine->second != cached || !fs::is_regular_file(cached)) {
      how = "built";
      fs::create_directories(opts.cache_dir);
      std::random_device rd;
      const fs::path work = opts.cache_dir / ("build-" + std::to_string(rd()));
      fs::create_directories(work);
      try {
        const auto t0 = std::chrono::steady_clock::now();
        opts.build_package(*t, work / "package");
        write_tar(work / "package", "kiln-" + t->name, work / "package.tar");
        fs::rename(work / "package.tar", cached);
        fs::remove_all(work);
        log("built the package of " + t->name + " in " +
            std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) + " s");
        // one package per target: the previous one this process built goes
        if (mine != built.end() && mine->second != cached) {
          std::error_code rm;
          if (fs::remove(mine->second, rm)) log("evicted the stale package " + mine->second.filename().string());
        }
        built[t->name] = cached;
      } catch (const std::exception& e) {
        std::error_code ec;
        fs::remove_all(work, ec);
        log("package of " + t->name + " failed: " + e.what());
        return error_reply(500, std::string("cannot build the package of ") + t->name + ": " + e.what());
      }
    }
    // Opened under the lock: a later build may evict this file, and an open
    // file stays readable after its name is removed.
    in.open(cached, std::ios::binary);
  }
  if (!in) return error_reply(500, "cannot read the cached package of " + t->name);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  Reply r;
  r.content_type = "application/x-tar";
  r.body = bytes.str();
  r.headers.push_back({"Content-Disposition", "attachment; filename=\"kiln-" + t->name + ".tar\""});
  r.headers.push_back({"X-Kiln-Package", how});
  return r;
}

void Server::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      if (live.load() >= opts.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);
      } else {
        std::make_shared<Session>(std::move(socket), *this)->start();
      }
    }
    accept();
  });
}

Server::Server(ServerOptions options) {
  if (!options.targets) throw std::invalid_argument("kiln serve: no target registry");
  if (options.token && options.token->empty()) throw std::invalid_argument("the token is empty");
  if (!options.listen.host.is_loopback() && !options.token)
    throw std::invalid_argument("refusing to serve on " + endpoint_text(options.listen.host, options.listen.port) +
                                ", which is not a loopback address, without a token: pass --token-file FILE "
                                "(clients send Authorization: Bearer <token>)");
  if (options.threads < 1) options.threads = 1;
  impl_ = std::make_unique<Impl>(std::move(options));
  Impl& m = *impl_;
  const tcp::endpoint ep(m.opts.listen.host, m.opts.listen.port);
  beast::error_code ec;
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::runtime_error("cannot serve on " + endpoint_text(ep.address(), ep.port()) + ": " + ec.message());
  const tcp::endpoint local = m.acceptor.local_endpoint();
  m.port = local.port();
  m.bound = endpoint_text(local.address(), m.port);
}

Server::~Server() {
  try {
    stop();
    impl_->handlers.join();
  } catch (const std::exception&) {
  }
}

std::string Server::bound() const { return impl_->bound; }
unsigned short Server::port() const { return impl_->port; }

void Server::run() {
  Impl& m = *impl_;
  if (m.opts.stop_on_signals) {
    m.signals.add(SIGINT);
    m.signals.add(SIGTERM);
    m.signals.async_wait([this](beast::error_code ec, int) {
      if (!ec) stop();
    });
  }
  m.accept();
  m.io.run();
  m.handlers.join();
}

void Server::stop() {
  beast::error_code ec;
  asio::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
    impl_->signals.cancel(ignored);
  });
  impl_->io.stop();
  (void)ec;
}

}  // namespace kiln::server
