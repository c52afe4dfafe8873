#pragma once
// accord-train's live status page (--status-port, rank 0): an HTTP server on its own thread
// (Boost.Beast) serving "/" — the page of observe/status_page.hpp, whose script draws what it
// fetches from "/status.json" (the job, the last step's figures, the loss, throughput and hidden
// fraction curves, every worker's time split, staleness and membership events) — and
// "/metrics" in Prometheus' text format.
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
