#include "metrics/exporter.h"

#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "metrics/exposition.h"
#include "metrics/textfile.h"

namespace kiln::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// One connection: read one request, answer, close.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const Registry& registry, std::atomic<int>& live)
      : stream_(std::move(socket)), registry_(registry), live_(live) {
    ++live_;
  }
  ~Session() { --live_; }

  void start() {
    parser_.header_limit(8 * 1024);
    parser_.body_limit(1024);  // a scrape has none; a small one is read to answer 405
    stream_.expires_after(std::chrono::seconds(10));
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

 private:
  void on_read(beast::error_code ec) {
    if (ec) return close();
    const auto& req = parser_.get();
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    res_.version(req.version());
    res_.keep_alive(false);
    res_.set(http::field::server, "kiln");
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res_.result(http::status::method_not_allowed);
      res_.set(http::field::allow, "GET, HEAD");
      res_.set(http::field::content_type, "text/plain; charset=utf-8");
      res_.body() = "only GET\n";
    } else if (target == "/metrics") {
      res_.result(http::status::ok);
      res_.set(http::field::content_type, kContentType);
      res_.body() = registry_.render();
    } else if (target == "/") {
      res_.result(http::status::ok);
      res_.set(http::field::content_type, "text/plain; charset=utf-8");
      res_.body() = "kiln run: metrics at /metrics\n";
    } else {
      res_.result(http::status::not_found);
      res_.set(http::field::content_type, "text/plain; charset=utf-8");
      res_.body() = "not found; metrics at /metrics\n";
    }
    res_.prepare_payload();
    if (req.method() == http::verb::head) res_.body().clear();  // Content-Length stays the GET's
    http::async_write(stream_, res_, [self = shared_from_this()](beast::error_code, size_t) { self->close(); });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8 * 1024};
  http::request_parser<http::string_body> parser_;
  http::response<http::string_body> res_;
  const Registry& registry_;
  std::atomic<int>& live_;
};

}  // namespace

struct Exporter::Impl {
  Impl(const Registry& r, ExporterOptions o) : registry(r), opts(std::move(o)), acceptor(io), timer(io) {}

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (!ec) {
        if (live.load() >= kMaxConnections) {
          beast::error_code ignored;
          socket.close(ignored);
        } else {
          std::make_shared<Session>(std::move(socket), registry, live)->start();
        }
      }
      accept();
    });
  }

  void write_file() {
    if (opts.textfile) write_textfile(*opts.textfile, registry.render(), opts.textfile_protected);
  }

  void arm_timer() {
    timer.expires_after(std::chrono::milliseconds(static_cast<long long>(opts.textfile_interval_s * 1000)));
    timer.async_wait([this](beast::error_code ec) {
      if (ec) return;
      try {
        write_file();
      } catch (const std::exception& e) {
        if (opts.log) *opts.log << "warning: metrics file: " << e.what() << std::endl;
      }
      arm_timer();
    });
  }

  const Registry& registry;
  ExporterOptions opts;
  std::atomic<int> live{0};  // before io: sessions the io_context destroys count down here
  asio::io_context io;
  tcp::acceptor acceptor;
  asio::steady_timer timer;
};

Exporter::Exporter(const Registry& registry, ExporterOptions options)
    : impl_(std::make_unique<Impl>(registry, std::move(options))) {
  Impl& m = *impl_;
  if (m.opts.listen) {
    const tcp::endpoint ep(m.opts.listen->host, m.opts.listen->port);
    const std::string where = (ep.address().is_v6() ? "[" + ep.address().to_string() + "]" : ep.address().to_string()) +
                              ":" + std::to_string(ep.port());
    beast::error_code ec;
    m.acceptor.open(ep.protocol(), ec);
    if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) m.acceptor.bind(ep, ec);
    if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw std::runtime_error("cannot serve metrics on " + where + ": " + ec.message());
    const tcp::endpoint local = m.acceptor.local_endpoint();
    port_ = local.port();
    bound_ = (local.address().is_v6() ? "[" + local.address().to_string() + "]" : local.address().to_string()) + ":" +
             std::to_string(port_);
    m.accept();
  }
  if (m.opts.textfile) {
    m.write_file();
    if (m.opts.textfile_interval_s > 0) m.arm_timer();
  }
  thread_ = std::thread([this] { impl_->io.run(); });
}

void Exporter::stop() {
  if (stopped_) return;
  stopped_ = true;
  impl_->io.stop();  // sessions in flight are abandoned: the run is over
  if (thread_.joinable()) thread_.join();
  // The io thread is gone: close here, so nothing is accepted any more.
  beast::error_code ec;
  impl_->acceptor.close(ec);
  impl_->timer.cancel();
  impl_->write_file();
}

Exporter::~Exporter() {
  try {
    stop();
  } catch (const std::exception&) {
  }
}

}  // namespace kiln::metrics
