#include "observe/status_server.hpp"

#include "observe/step_figures.hpp"

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
  std::optional<step_metrics> first;
  step_figures figures;  // the last step's, and the sums /metrics shows
  std::deque<std::string> events;

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
      response.body() = status_page_html();
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
    nlohmann::json status = {{"job", job},   {"steps", steps},   {"points", curve},
                             {"eval", eval}, {"staleness", figures.totals().staleness},
                             {"events", events}, {"last", nullptr}};
    if (first) {
      status["last"] = step_json(*figures.latest());
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
    text << figures.prometheus();
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
  s.figures.add(m);
  s.curve.push_back({static_cast<double>(m.step), m.train_loss, m.items_per_second, m.hidden_fraction});
  thin(s.curve);
  if (m.eval_loss >= 0) {
    s.eval.push_back({static_cast<double>(m.step), m.eval_loss});
    thin(s.eval);
  }
}

void status_server::on_event(const std::string& line) {
  const std::lock_guard lock(state_->mutex);
  state_->events.push_back(line);
  if (state_->events.size() > most_events) state_->events.pop_front();
}

}  // namespace accord
