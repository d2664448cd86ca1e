#include "transport.h"

#include <algorithm>
#include <iostream>
#include <iterator>
#include <vector>

#include <boost/asio/post.hpp>

#include "protocol.h"

namespace kiln::mpi {

namespace asio = boost::asio;
using nlohmann::json;

Transport::Transport(asio::io_context& io, int rank, int size, TransportOptions options)
    : io_(io), rank_(rank), size_(size), opts_(options), timer_(io), interval_(options.min_interval) {}

Transport::~Transport() {
  *alive_ = false;
  stop();
}

void Transport::start() {
  if (running_) return;
  running_ = true;
  interval_ = opts_.min_interval;
  arm();
}

void Transport::stop() {
  running_ = false;
  timer_.cancel();
  for (auto& p : sends_) {
    int done = 0;
    if (p.request != MPI_REQUEST_NULL) MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
    if (!done && p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
  }
  sends_.clear();
}

void Transport::send(int dest, const json& message) {
  std::string text = message.dump(-1, ' ', false, json::error_handler_t::replace);
  ++stats_.sent;
  stats_.bytes_sent += text.size();
  if (dest == rank_) {
    // Loopback: through the io_context, never inside send().
    std::weak_ptr<bool> alive = alive_;
    asio::post(io_, [this, alive, text = std::move(text)]() {
      if (alive.expired() || !handler_) return;
      json j = json::parse(text, nullptr, false);
      ++stats_.received;
      stats_.bytes_received += text.size();
      if (j.is_discarded() || !j.is_object()) {
        ++stats_.malformed;
        return;
      }
      handler_(rank_, std::move(j));
    });
    return;
  }
  sends_.push_back(Pending{MPI_REQUEST_NULL, std::move(text), dest});
  Pending& p = sends_.back();
  const int rc = MPI_Isend(p.buffer.data(), static_cast<int>(p.buffer.size()), MPI_CHAR, dest, kMessageTag,
                           MPI_COMM_WORLD, &p.request);
  if (rc != MPI_SUCCESS) {
    ++stats_.send_errors;
    sends_.pop_back();
    return;
  }
  // A reply is likely soon: poll quickly again.
  if (interval_ > opts_.min_interval && running_) {
    interval_ = opts_.min_interval;
    arm();
  }
}

void Transport::forget(int dest) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (it->dest != dest) {
      ++it;
      continue;
    }
    int done = 0;
    if (it->request != MPI_REQUEST_NULL) MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    if (!done && it->request != MPI_REQUEST_NULL) MPI_Request_free(&it->request);
    it = sends_.erase(it);
  }
  for (auto it = recvs_.begin(); it != recvs_.end();) {
    if (it->source != dest) {
      ++it;
      continue;
    }
    auto next = std::next(it);
    if (!it->done) abandoned_.splice(abandoned_.end(), recvs_, it);
    else recvs_.erase(it);
    it = next;
  }
}

void Transport::arm() {
  timer_.expires_after(interval_);
  std::weak_ptr<bool> alive = alive_;
  timer_.async_wait([this, alive](const boost::system::error_code& ec) {
    if (ec || alive.expired() || !running_) return;
    poll();
  });
}

void Transport::deliver(int source, const std::string& text) {
  ++stats_.received;
  stats_.bytes_received += text.size();
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    ++stats_.malformed;
    return;
  }
  if (handler_) handler_(source, std::move(j));
}

bool Transport::deliver_finished() {
  bool any = false;
  while (running_) {
    // The first finished receive not behind an unfinished one of its source.
    std::vector<int> blocked;
    auto ready = recvs_.end();
    for (auto it = recvs_.begin(); it != recvs_.end(); ++it) {
      if (std::find(blocked.begin(), blocked.end(), it->source) != blocked.end()) continue;
      if (!it->done) {
        int done = 0;
        if (MPI_Test(&it->request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS) it->done = done != 0;
      }
      if (it->done) {
        ready = it;
        break;
      }
      blocked.push_back(it->source);
    }
    if (ready == recvs_.end()) break;
    // Out of the list before the handler runs: it may call forget().
    Incoming in = std::move(*ready);
    recvs_.erase(ready);
    deliver(in.source, in.buffer);
    any = true;
  }
  return any;
}

void Transport::poll() {
  bool traffic = false;
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    if (MPI_Test(&it->request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      ++stats_.send_errors;
      done = 1;
    }
    if (done) {
      it = sends_.erase(it);
      traffic = true;
    } else {
      ++it;
    }
  }
  // Bounded per poll so timers and pipes get their turn under a flood.
  for (int n = 0; n < 4096 && running_; ++n) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, kMessageTag, MPI_COMM_WORLD, &flag, &msg, &st) != MPI_SUCCESS || !flag)
      break;
    int count = 0;
    MPI_Get_count(&st, MPI_CHAR, &count);
    recvs_.push_back(Incoming{MPI_REQUEST_NULL, std::string(static_cast<size_t>(std::max(count, 0)), '\0'),
                              st.MPI_SOURCE, false});
    Incoming& in = recvs_.back();
    if (MPI_Imrecv(in.buffer.data(), count, MPI_CHAR, &msg, &in.request) != MPI_SUCCESS) {
      recvs_.pop_back();
      break;
    }
    traffic = true;
  }
  traffic = deliver_finished() || traffic;
  if (!running_) return;
  interval_ = traffic ? opts_.min_interval : std::min(interval_ * 2, opts_.max_interval);
  if (interval_.count() <= 0) interval_ = std::chrono::microseconds(1);
  arm();
}

}  // namespace kiln::mpi
