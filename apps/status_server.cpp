#include "apps/status_server.hpp"

#include <utility>  // before Boost 1.74's asio/awaitable.hpp, which uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
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

std::string escape_html(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

struct point {
  double step, loss;
};

// A polyline chart of one or two series in an SVG of its own.
std::string svg_chart(const std::vector<point>& train, const std::vector<point>& eval) {
  constexpr double width = 720, height = 300, margin = 50;
  if (train.empty()) return "<p>no steps yet</p>";
  double x_high = 1, y_low = 1e300, y_high = -1e300;
  for (const auto* series : {&train, &eval})
    for (const point& p : *series) {
      x_high = std::max(x_high, p.step);
      y_low = std::min(y_low, p.loss);
      y_high = std::max(y_high, p.loss);
    }
  if (y_high <= y_low) y_high = y_low + 1;
  const auto x = [&](double step) { return margin + (width - 2 * margin) * step / x_high; };
  const auto y = [&](double loss) { return height - margin - (height - 2 * margin) * (loss - y_low) / (y_high - y_low); };
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
      << "' style='background:#fff;border:1px solid #ccc'>";
  svg << "<line x1='" << margin << "' y1='" << height - margin << "' x2='" << width - margin << "' y2='"
      << height - margin << "' stroke='#888'/><line x1='" << margin << "' y1='" << margin << "' x2='" << margin
      << "' y2='" << height - margin << "' stroke='#888'/>";
  svg << "<text x='" << margin << "' y='" << margin - 8 << "' font-size='12'>" << number(y_high, "%.4f") << "</text>";
  svg << "<text x='" << 4 << "' y='" << height - margin << "' font-size='12'>" << number(y_low, "%.4f") << "</text>";
  svg << "<text x='" << width - margin - 40 << "' y='" << height - margin + 20 << "' font-size='12'>step "
      << number(x_high, "%.0f") << "</text>";
  const auto polyline = [&](const std::vector<point>& series, const char* colour, double stroke) {
    svg << "<polyline fill='none' stroke='" << colour << "' stroke-width='" << stroke << "' points='";
    for (const point& p : series) svg << number(x(p.step), "%.1f") << ',' << number(y(p.loss), "%.1f") << ' ';
    svg << "'/>";
  };
  polyline(train, "#1f77b4", 1);
  if (!eval.empty()) polyline(eval, "#ff7f0e", 2.5);
  svg << "<text x='" << width - 160 << "' y='" << margin << "' font-size='12' fill='#1f77b4'>train loss</text>";
  svg << "<text x='" << width - 160 << "' y='" << margin + 16 << "' font-size='12' fill='#ff7f0e'>held-out loss</text>";
  svg << "</svg>";
  return svg.str();
}

}  // namespace

struct status_server::state {
  std::string job;
  std::uint64_t steps = 0;
  mutable std::mutex mutex;
  std::vector<point> train, eval;
  std::optional<step_metrics> last;
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
      response.body() = render_page();
    } else if (target == "/metrics") {
      response.result(http::status::ok);
      response.set(http::field::content_type, "text/plain; version=0.0.4");
      response.body() = render_prometheus();
    } else {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "not found: the status page is / and the Prometheus metrics are /metrics\n";
    }
    response.prepare_payload();
    http::write(socket, response, error);
    socket.shutdown(tcp::socket::shutdown_both, error);
  }

  std::string render_page() const {
    const std::lock_guard lock(mutex);
    std::ostringstream page;
    page << "<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='refresh' content='5'>"
            "<title>accord: "
         << escape_html(job)
         << "</title><style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:right}"
            "th{background:#eee}</style></head><body>";
    page << "<h1>accord</h1><p>" << escape_html(job) << "</p>";
    if (last) {
      const step_metrics& m = *last;
      page << "<p>step " << m.step << " of " << steps << " | train loss " << number(m.train_loss, "%.4f")
           << " | held-out loss " << (eval.empty() ? std::string("-") : number(eval.back().loss, "%.4f")) << " | "
           << number(m.items_per_second, "%.0f") << " items/s | " << number(m.bits_per_parameter, "%.1f")
           << " bits/param | hidden " << number(100 * m.hidden_fraction, "%.0f") << "% | lr "
           << number(m.learning_rate) << " | gradient norm " << number(m.gradient_norm, "%.4g") << " | "
           << m.workers << " workers, epoch " << m.epoch << " | " << number(m.seconds, "%.1f") << " s</p>";
    }
    page << "<h2>Loss</h2>" << svg_chart(train, eval);
    page << "<h2>Workers (last step)</h2><table><tr><th>rank</th><th>compute s</th><th>communication s</th>"
            "<th>wait s</th></tr>";
    if (last)
      for (std::size_t r = 0; r < last->per_worker.size(); ++r) {
        const worker_seconds& w = last->per_worker[r];
        page << "<tr><td>" << r << "</td><td>" << number(w.compute, "%.4f") << "</td><td>"
             << number(w.communication, "%.4f") << "</td><td>" << number(w.wait, "%.4f") << "</td></tr>";
      }
    page << "</table><h2>Membership</h2><ul>";
    for (const std::string& line : events) page << "<li>" << escape_html(line) << "</li>";
    if (events.empty()) page << "<li>no membership events</li>";
    page << "</ul></body></html>\n";
    return page.str();
  }

  std::string render_prometheus() const {
    const std::lock_guard lock(mutex);
    std::ostringstream text;
    const auto gauge = [&](const char* name, const char* help, double value) {
      text << "# HELP accord_" << name << ' ' << help << "\n# TYPE accord_" << name << " gauge\naccord_" << name << ' '
           << number(value, "%.10g") << '\n';
    };
    gauge("steps_total", "optimizer steps the job runs", static_cast<double>(steps));
    if (!last) return text.str();
    const step_metrics& m = *last;
    gauge("step", "last completed optimizer step", static_cast<double>(m.step));
    gauge("train_loss", "mean training loss of the last step", m.train_loss);
    if (!eval.empty()) gauge("eval_loss", "latest held-out loss", eval.back().loss);
    gauge("items_per_second", "tokens or examples per second, all workers", m.items_per_second);
    gauge("bits_per_parameter", "bits sent per parameter and worker in the last step", m.bits_per_parameter);
    gauge("hidden_fraction", "fraction of communication time hidden behind compute", m.hidden_fraction);
    gauge("learning_rate", "learning rate of the last step", m.learning_rate);
    gauge("gradient_norm", "norm of the last step's mean gradient", m.gradient_norm);
    gauge("workers", "workers in the job", m.workers);
    gauge("epoch", "membership epoch", static_cast<double>(m.epoch));
    gauge("seconds", "seconds since the job started", m.seconds);
    text << "# HELP accord_worker_seconds seconds of the last step per worker and activity\n"
            "# TYPE accord_worker_seconds gauge\n";
    for (std::size_t r = 0; r < m.per_worker.size(); ++r) {
      const worker_seconds& w = m.per_worker[r];
      for (const auto& [activity, seconds] :
           {std::pair{"compute", w.compute}, std::pair{"communication", w.communication}, std::pair{"wait", w.wait}})
        text << "accord_worker_seconds{rank=\"" << r << "\",activity=\"" << activity << "\"} "
             << number(seconds, "%.10g") << '\n';
    }
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
  s.last = m;
  s.train.push_back({static_cast<double>(m.step), m.train_loss});
  if (m.eval_loss >= 0) s.eval.push_back({static_cast<double>(m.step), m.eval_loss});
  if (s.train.size() > most_points) {  // every other point: the curve keeps its shape and its length bounded
    std::vector<point> thinned;
    for (std::size_t i = 0; i < s.train.size(); i += 2) thinned.push_back(s.train[i]);
    s.train = std::move(thinned);
  }
}

void status_server::on_event(const std::string& line) {
  const std::lock_guard lock(state_->mutex);
  state_->events.push_back(line);
  if (state_->events.size() > most_events) state_->events.pop_front();
}

}  // namespace accord
