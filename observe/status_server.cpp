#include "observe/status_server.hpp"

#include "observe/thread_cpu.hpp"

#include <utility>  // before Boost 1.74's asio/awaitable.hpp, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "observe/status_page.hpp"

#include <accord/version.hpp>

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

namespace accord {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t most_events = 50;    // membership lines kept for the page
constexpr std::size_t most_points = 2000;  // curve points kept (older ones thinned)

std::string number(double value, const char* format = "%.6g") {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// One point of the curves: step, train loss, items/s, hidden fraction.
using curve_point = std::array<double, 4>;
using eval_point = std::array<double, 2>;

// Every other point: the curve keeps its shape and its length bounded.
template <typename Point>
void thin(std::vector<Point>& points) {
  if (points.size() <= most_points) return;
  std::vector<Point> kept;
  for (std::size_t i = 0; i < points.size(); i += 2) kept.push_back(points[i]);
  points = std::move(kept);
}

}  // namespace

struct status_server::state {
  std::string job;
  std::uint64_t steps = 0;
  mutable std::mutex mutex;
  std::vector<curve_point> curve;
  std::vector<eval_point> eval;
  std::optional<step_metrics> first, last;
  std::vector<std::uint64_t> staleness;  // gradients applied k updates stale, whole job, by k
  std::deque<std::string> events;
  // Sums over the steps this process saw, for Prometheus' counters (rate() of them gives a pace).
  double items = 0;
  double bytes_sent = 0;
  std::vector<worker_seconds> worker_totals;  // by rank
  thread_cpu cpu_totals;                      // CPU seconds by thread role, all processes

  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;

  void accept() {
    acceptor.async_accept([this](boost::system::error_code error, tcp::socket socket) {
      if (error) return;  // closed: the server is stopping
      serve(std::move(socket));
      accept();
    });
  }

  // One request per connection, answered on the server's thread; a client that sends nothing
  // for 2 s is dropped, so it cannot hold the page for others.
  void serve(tcp::socket socket) {
    const timeval timeout{2, 0};
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    boost::beast::flat_buffer buffer;
    http::request<http::string_body> request;
    boost::system::error_code error;
    http::read(socket, buffer, request, error);
    if (error) return;
    http::response<http::string_body> response;
    response.version(request.version());
    response.keep_alive(false);
    const std::string target(request.target());
    if (target == "/" || target == "/index.html") {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/html; charset=utf-8");
      response.body() = status_page_html;
    } else if (target == "/status.json") {
      response.result(http::status::ok);
      response.set(http::field::content_type, "application/json");
      response.set(http::field::cache_control, "no-store");
      response.body() = render_json();
    } else if (target == "/metrics") {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4");
      response.body() = render_prometheus();
    } else {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "not found: the status page is /, its figures /status.json and the Prometheus metrics /metrics\n";
    }
    response.prepare_payload();
    http::write(socket, response, error);
    socket.shutdown(tcp::socket::shutdown_both, error);
  }

  // What the page draws: the job, the last step, the curves, staleness and membership events.
  std::string render_json() const {
    const std::lock_guard lock(mutex);
    nlohmann::json status = {{"job", job},         {"steps", steps},         {"points", curve},
                             {"eval", eval},       {"staleness", staleness}, {"events", events},
                             {"last", nullptr}};
    if (last) {
      const step_metrics& m = *last;
      nlohmann::json per_worker = nlohmann::json::array();
      for (const worker_seconds& w : m.per_worker)
        per_worker.push_back({{"compute", w.compute}, {"communication", w.communication}, {"wait", w.wait}});
      status["last"] = {{"step", m.step},
                        {"train_loss", m.train_loss},
                        {"eval_loss", eval.empty() ? nlohmann::json() : nlohmann::json(eval.back()[1])},
                        {"seconds", m.seconds},
                        {"items_per_second", m.items_per_second},
                        {"bits_per_parameter", m.bits_per_parameter},
                        {"bytes", m.bytes_sent},
                        {"hidden_fraction", m.hidden_fraction},
                        {"learning_rate", m.learning_rate},
                        {"gradient_norm", m.gradient_norm},
                        {"workers", m.workers},
                        {"epoch", m.epoch},
                        {"per_worker", std::move(per_worker)}};
      if (m.vote_agreement >= 0) status["last"]["vote_agreement"] = m.vote_agreement;
      if (m.consensus_distance >= 0) status["last"]["consensus_distance"] = m.consensus_distance;
      // The pace for the ETA is measured from the first step this run saw (a resumed job starts late).
      status["first_step"] = first->step;
      status["first_seconds"] = first->seconds;
    }
    return status.dump();
  }

  // Names as Prometheus' conventions have them: counters end in _total, durations and sizes name
  // their base unit (_seconds, _bytes), fractions end in _ratio.
  std::string render_prometheus() const {
    const std::lock_guard lock(mutex);
    std::ostringstream text;
    const auto metric = [&](const char* type, const char* name, const char* help) {
      text << "# HELP accord_" << name << ' ' << help << "\n# TYPE accord_" << name << ' ' << type << '\n';
    };
    const auto one = [&](const char* type, const char* name, const char* help, double value) {
      metric(type, name, help);
      text << "accord_" << name << ' ' << number(value, "%.10g") << '\n';
    };
    metric("gauge", "build_info", "accord's version, as a label (the value is 1)");
    text << "accord_build_info{version=\"" << version() << "\"} 1\n";
    one("gauge", "steps_target", "optimizer steps the job runs", static_cast<double>(steps));
    one("counter", "steps_total", "optimizer steps done", last ? static_cast<double>(last->step) : 0);
    one("counter", "items_total", "tokens (language model) or examples trained on by all workers", items);
    one("counter", "sent_bytes_total", "bytes sent by all workers", bytes_sent);
    if (!last) return text.str();
    const step_metrics& m = *last;
    one("counter", "elapsed_seconds_total", "seconds since the job started, at the last step", m.seconds);
    one("gauge", "train_loss", "mean training loss of the last step", m.train_loss);
    if (!eval.empty()) one("gauge", "eval_loss", "latest held-out loss", eval.back()[1]);
    // Bytes, Prometheus' base unit (promtool's lint refuses bits): the progress line's bits/param over 8.
    one("gauge", "sent_bytes_per_parameter", "bytes sent per parameter and worker in the last step",
        m.bits_per_parameter / 8);
    one("gauge", "communication_hidden_ratio", "fraction of the last step's communication time hidden behind compute",
        m.hidden_fraction);
    one("gauge", "learning_rate", "learning rate of the last step", m.learning_rate);
    one("gauge", "gradient_norm", "norm of the last step's mean gradient", m.gradient_norm);
    one("gauge", "workers", "workers in the job", m.workers);
    one("gauge", "membership_epoch", "membership epoch (it grows with each change of the workers)",
        static_cast<double>(m.epoch));
    metric("counter", "worker_seconds_total", "seconds each worker spent on each activity, summed over the steps");
    for (std::size_t r = 0; r < worker_totals.size(); ++r) {
      const worker_seconds& w = worker_totals[r];
      for (const auto& [activity, seconds] :
           {std::pair{"compute", w.compute}, std::pair{"communication", w.communication}, std::pair{"wait", w.wait}})
        text << "accord_worker_seconds_total{rank=\"" << r << "\",activity=\"" << activity << "\"} "
             << number(seconds, "%.10g") << '\n';
    }
    metric("counter", "cpu_seconds_total", "CPU seconds of the job's threads by role, all processes");
    for (const auto& [role, seconds] : by_role(cpu_totals))
      text << "accord_cpu_seconds_total{role=\"" << role << "\"} " << number(seconds, "%.10g") << '\n';
    return text.str();
  }
};

status_server::status_server(int port, std::string job_description, std::uint64_t steps)
    : state_(std::make_unique<state>()) {
  state_->job = std::move(job_description);
  state_->steps = steps;
  boost::system::error_code error;
  const tcp::endpoint endpoint(tcp::v4(), static_cast<unsigned short>(port));
  state_->acceptor.open(endpoint.protocol(), error);
  if (!error) state_->acceptor.set_option(tcp::acceptor::reuse_address(true), error);
  if (!error) state_->acceptor.bind(endpoint, error);
  if (!error) state_->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error)
    throw std::runtime_error("--status-port " + std::to_string(port) + ": cannot listen (" + error.message() + ")");
  state_->accept();
  state_->thread = std::thread([s = state_.get()] { s->io.run(); });
}

status_server::~status_server() {
  asio::post(state_->io, [s = state_.get()] {
    boost::system::error_code ignored;
    s->acceptor.close(ignored);
  });
  state_->thread.join();
}

int status_server::port() const { return state_->acceptor.local_endpoint().port(); }

void status_server::on_step(const step_metrics& m) {
  const std::lock_guard lock(state_->mutex);
  auto& s = *state_;
  if (!s.first) s.first = m;
  s.last = m;
  s.curve.push_back({static_cast<double>(m.step), m.train_loss, m.items_per_second, m.hidden_fraction});
  thin(s.curve);
  if (m.eval_loss >= 0) {
    s.eval.push_back({static_cast<double>(m.step), m.eval_loss});
    thin(s.eval);
  }
  s.items += m.items;
  s.bytes_sent += static_cast<double>(m.bytes_sent);
  s.cpu_totals += m.cpu;
  if (s.worker_totals.size() < m.per_worker.size()) s.worker_totals.resize(m.per_worker.size());
  for (std::size_t r = 0; r < m.per_worker.size(); ++r) {
    s.worker_totals[r].compute += m.per_worker[r].compute;
    s.worker_totals[r].communication += m.per_worker[r].communication;
    s.worker_totals[r].wait += m.per_worker[r].wait;
  }
  if (s.staleness.size() < m.staleness.size()) s.staleness.resize(m.staleness.size());
  for (std::size_t k = 0; k < m.staleness.size(); ++k) s.staleness[k] += m.staleness[k];
}

void status_server::on_event(const std::string& line) {
  const std::lock_guard lock(state_->mutex);
  state_->events.push_back(line);
  if (state_->events.size() > most_events) state_->events.pop_front();
}

}  // namespace accord
