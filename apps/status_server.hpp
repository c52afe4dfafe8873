#pragma once
// accord-train's live status page (--status-port, rank 0): an HTTP server on its own thread
// (Boost.Beast) serving "/" — a self-contained HTML page, refreshed every 5 s, with the loss
// curves drawn as inline SVG, the last step's figures, every worker's time split and the
// membership events — and "/metrics" in Prometheus' text format. No script, no external file:
// the machines it runs on may have no internet.
#include <accord/job.hpp>

#include <memory>
#include <string>

namespace accord {

class status_server {
public:
  // Listens on `port` of every interface (0: a free port, see port()). Throws
  // std::runtime_error naming the port when it cannot listen.
  status_server(int port, std::string job_description, std::uint64_t steps);
  ~status_server();
  status_server(const status_server&) = delete;
  status_server& operator=(const status_server&) = delete;

  int port() const;
  void on_step(const step_metrics& m);
  void on_event(const std::string& line);

private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace accord
