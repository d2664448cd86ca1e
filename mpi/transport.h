// Point-to-point JSON messages between ranks, polled from a Boost.Asio loop.
//
// One thread calls MPI (the io_context's; MPI_THREAD_FUNNELED): a steady_timer
// polls MPI_Improbe / MPI_Imrecv for incoming messages and MPI_Test for sends
// and receives in flight. Receives never block: a large message whose sender
// dies after its envelope arrived (rendezvous) stays an unfinished request
// instead of hanging the loop, so heartbeats still find the sender lost. The interval backs off from min_interval (right after traffic) to
// max_interval (idle), so an idle rank sleeps in epoll instead of spinning,
// which matters when many ranks share few cores. Sends are MPI_Isend from a
// buffer kept until the request completes. A message to this rank itself is
// delivered through the io_context without MPI (coordinator slots on rank 0).
#pragma once
#include <utility>  // before Asio (Boost 1.74 under newer GCC)
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <string>

#include <mpi.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

namespace kiln::mpi {

struct TransportOptions {
  std::chrono::microseconds min_interval{20};
  std::chrono::microseconds max_interval{2000};
};

struct TransportStats {
  uint64_t sent = 0, received = 0, bytes_sent = 0, bytes_received = 0, malformed = 0, send_errors = 0;
};

class Transport {
 public:
  using Handler = std::function<void(int source, nlohmann::json message)>;

  Transport(boost::asio::io_context& io, int rank, int size, TransportOptions options = {});
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Called on the io_context for every message received (parsed).
  void on_message(Handler h) { handler_ = std::move(h); }
  // Starts polling.
  void start();
  // Stops polling and frees the requests of sends still in flight.
  void stop();

  // Receives what has arrived now (before a timeout decision: a stalled loop
  // must not mistake unread messages for silence).
  void poll_now() {
    if (running_) poll();
  }
  // Queues `message` for `dest` (MPI_Isend). Never blocks.
  void send(int dest, const nlohmann::json& message);
  // A peer that went away: its unfinished sends are freed, not waited for, and
  // its unfinished receives are never delivered.
  void forget(int dest);
  // Sends still in flight.
  size_t pending_sends() const { return sends_.size(); }
  const TransportStats& stats() const { return stats_; }

 private:
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string buffer;
    int dest = 0;
  };
  // A matched receive in flight; delivered in arrival order per source.
  struct Incoming {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string buffer;
    int source = 0;
    bool done = false;
  };
  void arm();
  void poll();
  // Delivers the finished receives at the head of each source's queue.
  bool deliver_finished();
  void deliver(int source, const std::string& text);

  boost::asio::io_context& io_;
  int rank_, size_;
  TransportOptions opts_;
  Handler handler_;
  boost::asio::steady_timer timer_;
  std::chrono::microseconds interval_;
  std::list<Pending> sends_;  // list: buffers never move while MPI holds them
  std::list<Incoming> recvs_;
  std::list<Incoming> abandoned_;  // receives from lost peers: MPI may still hold their buffers
  bool running_ = false;
  TransportStats stats_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace kiln::mpi
