#include "metrics/listen.h"

#include <stdexcept>

namespace kiln::metrics {

ListenAddress parse_listen(const std::string& text, bool allow_remote, const std::string& allow_flag) {
  const std::string form = "expected HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464; port 0 picks a free one), not '" +
                           text + "'";
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) throw std::invalid_argument(form);
  std::string host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (host.front() == '[') {
    if (host.back() != ']') throw std::invalid_argument(form);
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  ListenAddress out;
  boost::system::error_code ec;
  out.host = boost::asio::ip::make_address(host, ec);
  if (ec) throw std::invalid_argument(form + " (the host must be a numeric address or localhost)");
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    throw std::invalid_argument(form);
  out.port = static_cast<unsigned short>(std::stoi(port));
  if (!out.host.is_loopback() && !allow_remote)
    throw std::invalid_argument("refusing to serve metrics on " + text + ", which is not a loopback address; " +
                                "pass " + allow_flag + " to expose them to the network");
  return out;
}

}  // namespace kiln::metrics
