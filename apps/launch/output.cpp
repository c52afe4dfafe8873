#include "apps/launch/output.hpp"

#include <poll.h>

#include <cerrno>

namespace accord::launch {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = write(fd, data.data(), data.size());
    if (written >= 0) {
      data.remove_prefix(static_cast<std::size_t>(written));
    } else if (errno == EAGAIN) {
      pollfd wait_for{fd, POLLOUT, 0};
      poll(&wait_for, 1, -1);
    } else if (errno != EINTR) {
      return;
    }
  }
}

void say(const std::string& line) { write_all(STDERR_FILENO, "accord-launch: " + line + "\n"); }

void output_stream::read_available() {
  char buffer[65536];
  while (open()) {
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got > 0) {
      pending.append(buffer, static_cast<std::size_t>(got));
      forward_lines(false);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      forward_lines(true);
      close(fd);
      fd = -1;
    } else if (errno == EAGAIN) {
      return;
    }
  }
}

void output_stream::forward_lines(bool at_end) {
  std::string out, logged;
  const auto forward = [&](std::string_view line) {
    if (destination >= 0) out.append(prefix).append(line).push_back('\n');
    if (log >= 0) logged.append(line).push_back('\n');
  };
  std::size_t begin = 0;
  for (std::size_t newline; (newline = pending.find('\n', begin)) != std::string::npos; begin = newline + 1)
    forward(std::string_view(pending).substr(begin, newline - begin));
  pending.erase(0, begin);
  if (!pending.empty() && (at_end || pending.size() >= longest_line)) {
    forward(pending);
    pending.clear();
  }
  if (!out.empty()) write_all(destination, out);
  if (!logged.empty()) write_all(log, logged);
}

}  // namespace accord::launch
