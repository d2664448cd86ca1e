// Where the metrics endpoint listens: "HOST:PORT" (IPv4, "localhost" or
// "[IPv6]"; port 0 picks a free one). Loopback only unless allowed: a scrape
// endpoint shows what a node is doing, so exposing it is an explicit choice.
#pragma once
#include <string>

#include <boost/asio/ip/address.hpp>

namespace kiln::metrics {

struct ListenAddress {
  boost::asio::ip::address host;
  unsigned short port = 0;
};

// Parses `text`. Throws std::invalid_argument with a message naming the flag's
// expected form for a malformed one, and for a non-loopback address unless
// allow_remote (the message names the flag that allows it).
ListenAddress parse_listen(const std::string& text, bool allow_remote,
                           const std::string& allow_flag = "--metrics-allow-remote");

}  // namespace kiln::metrics
