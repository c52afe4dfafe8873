#include "recovery/checkpoint.hpp"

#include "transport/wire_precision.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace accord {
namespace {

constexpr char magic[8] = {'A', 'C', 'C', 'O', 'R', 'D', 'C', 'K'};
constexpr std::uint32_t version = 4;

// A name of a block code, whose rounds carry error-feedback residuals.
bool carries_feedback(const std::string& name) {
  try {
    return block_quantized(parse_wire_precision(name, "error-feedback precision"));
  } catch (const std::invalid_argument&) {
    return false;
  }
}
constexpr std::uint32_t oldest_readable = 2;  // version 2: no error-feedback section
constexpr std::size_t chunk_bytes = 1 << 20;
constexpr std::uint32_t max_slots = 8;
constexpr std::uint32_t max_text = 1u << 20;
constexpr std::uint32_t max_momenta = 1u << 16;
// Examples drawn since a run started: 2^62 is past any run (a million examples a second for
// 146,000 years); beyond it the stream's positions would wrap around 2^64.
constexpr std::uint64_t max_data_position = std::uint64_t{1} << 62;

std::string system_error(const std::string& path, const std::string& what) {
  return path + ": " + what + " (" + std::strerror(errno) + ")";
}

// Buffered writes to a file descriptor, with the crc32 of everything written.
class writer {
public:
  writer(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644)) {
    if (fd_ < 0) throw std::runtime_error(system_error(path, "cannot create the checkpoint"));
    buffer_.reserve(chunk_bytes);
  }
  ~writer() {
    if (fd_ >= 0) ::close(fd_);
  }
  template <class T>
  void scalar(T value) { bytes(reinterpret_cast<const char*>(&value), sizeof value); }
  void text(const std::string& s) {
    scalar<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  void floats(const std::vector<float>& v) { bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)); }
  void bytes(const char* data, std::size_t n) {
    if (n == 0) return;  // crc32 of a null buffer would restart the crc
    crc_ = crc32_z(crc_, reinterpret_cast<const Bytef*>(data), n);
    while (n > 0) {
      const std::size_t take = std::min(n, chunk_bytes - buffer_.size());
      buffer_.insert(buffer_.end(), data, data + take);
      data += take;
      n -= take;
      if (buffer_.size() == chunk_bytes) flush();
    }
  }
  // Appends the crc, then makes the file durable.
  void finish() {
    const std::uint32_t crc = static_cast<std::uint32_t>(crc_);
    bytes(reinterpret_cast<const char*>(&crc), sizeof crc);
    flush();
    if (::fsync(fd_) != 0) throw std::runtime_error(system_error(path_, "cannot sync the checkpoint"));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw std::runtime_error(system_error(path_, "cannot write the checkpoint"));
  }

private:
  void flush() {
    const char* at = buffer_.data();
    std::size_t left = buffer_.size();
    while (left > 0) {
      const ssize_t written = ::write(fd_, at, left);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) throw std::runtime_error(system_error(path_, "cannot write the checkpoint"));
      at += written;
      left -= static_cast<std::size_t>(written);
    }
    buffer_.clear();
  }

  std::string path_;
  int fd_;
  std::vector<char> buffer_;
  uLong crc_ = crc32_z(0, nullptr, 0);
};

// Reads a checkpoint of known size; no claimed size is believed before it fits in what is left.
class reader {
public:
  reader(std::istream& in, std::uint64_t size, const std::string& name) : in_(in), size_(size), name_(name) {}
  [[noreturn]] void fail(const std::string& problem) const { throw std::runtime_error(name_ + ": " + problem); }

  void exact(char* into, std::size_t n, const char* what) {
    if (n > left()) fail(std::string("truncated checkpoint (in the ") + what + ")");
    in_.read(into, static_cast<std::streamsize>(n));
    if (static_cast<std::size_t>(in_.gcount()) != n) fail(std::string("truncated checkpoint (in the ") + what + ")");
    at_ += n;
  }
  template <class T>
  T scalar(const char* what) {
    T value;
    exact(reinterpret_cast<char*>(&value), sizeof value, what);
    return value;
  }
  std::string text(const char* what) {
    const auto n = scalar<std::uint32_t>(what);
    if (n > max_text) fail(std::string("implausible length of the ") + what);
    if (n > left()) fail(std::string("truncated checkpoint (in the ") + what + ")");
    std::string s(n, '\0');
    exact(s.data(), n, what);
    return s;
  }
  std::vector<float> floats(std::uint64_t n, const char* what) {
    if (n > left() / sizeof(float))
      fail(std::string("the ") + what + " claim " + std::to_string(n) + " values, more than the file holds (" +
           std::to_string(size_) + " bytes)");
    std::vector<float> v(n);
    exact(reinterpret_cast<char*>(v.data()), n * sizeof(float), what);
    return v;
  }
  // The crc32 of every byte before the last four, checked against them; then back to `from`.
  std::uint32_t check_crc(std::uint64_t from) {
    if (size_ < from + sizeof(std::uint32_t)) fail("truncated checkpoint (" + std::to_string(size_) + " bytes)");
    in_.seekg(0);
    uLong crc = crc32_z(0, nullptr, 0);
    std::vector<char> chunk(chunk_bytes);
    for (std::uint64_t left = size_ - sizeof(std::uint32_t); left > 0;) {
      const std::size_t take = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk_bytes));
      in_.read(chunk.data(), static_cast<std::streamsize>(take));
      if (static_cast<std::size_t>(in_.gcount()) != take) fail("cannot read the checkpoint");
      crc = crc32_z(crc, reinterpret_cast<const Bytef*>(chunk.data()), take);
      left -= take;
    }
    std::uint32_t stored = 0;
    in_.read(reinterpret_cast<char*>(&stored), sizeof stored);
    if (!in_ || stored != static_cast<std::uint32_t>(crc)) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "corrupt checkpoint: crc32 %08x computed over the file, %08x stored (damaged or truncated)",
                    static_cast<unsigned>(crc), static_cast<unsigned>(stored));
      fail(line);
    }
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(from));
    return stored;
  }
  void expect_end() {
    if (left() != 0) fail("unexpected bytes after the checkpoint's end");
  }

private:
  // Bytes left before the trailing crc.
  std::uint64_t left() const {
    const std::uint64_t end = size_ >= sizeof(std::uint32_t) ? size_ - sizeof(std::uint32_t) : 0;
    return end > at_ ? end - at_ : 0;
  }

  std::istream& in_;
  std::uint64_t size_;
  std::string name_;
  std::uint64_t at_ = 0;
};

// Which values cannot be trained from, if any.
void check_values(const reader& r, const checkpoint& c) {
  auto finite = [&](const std::vector<float>& values, const std::string& what) {
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!std::isfinite(values[i])) r.fail(what + " " + std::to_string(i) + " is not finite (" + std::to_string(values[i]) + ")");
  };
  if (!std::isfinite(c.seconds) || c.seconds < 0) r.fail("implausible clock " + std::to_string(c.seconds) + " s");
  finite(c.parameters, "parameter");
  finite(c.optimizer, "optimizer state value");
  for (std::size_t m = 0; m < c.momenta.size(); ++m) finite(c.momenta[m], "momentum " + std::to_string(m) + " value");
  finite(c.residuals, "error-feedback residual");
  finite(c.replica, "replica parameter");
  finite(c.topology_shared, "topology's shared value");
  for (std::size_t w = 0; w < c.topology_workers.size(); ++w) {
    const checkpoint_topology_worker& worker = c.topology_workers[w];
    finite(worker.local_values, "worker " + std::to_string(w) + "'s local optimizer value");
    finite(worker.own, "worker " + std::to_string(w) + "'s topology value");
    if (worker.local_step > c.steps)
      r.fail("worker " + std::to_string(w) + "'s local optimizer step " + std::to_string(worker.local_step) +
             " is beyond the checkpoint's step count " + std::to_string(c.steps));
  }
  if (c.slots == 2) {  // AdamW: m, then v, whose entries are squares' averages
    const std::size_t n = c.parameters.size();
    for (std::size_t i = 0; i < n; ++i)
      if (c.optimizer[n + i] < 0)
        r.fail("AdamW second moment " + std::to_string(i) + " is negative (" + std::to_string(c.optimizer[n + i]) + ")");
  }
  if (c.slots > 0 && c.optimizer_step > c.steps)
    r.fail("optimizer step " + std::to_string(c.optimizer_step) + " is beyond the checkpoint's step count " +
           std::to_string(c.steps));
}

checkpoint parse(std::istream& in, std::uint64_t size, const std::string& name) {
  reader r(in, size, name);
  if (size < sizeof magic + 2 * sizeof(std::uint32_t))
    r.fail("truncated checkpoint (" + std::to_string(size) + " bytes, shorter than a header)");
  char head[sizeof magic];
  in.read(head, sizeof head);
  if (!in || std::memcmp(head, magic, sizeof magic) != 0) r.fail("not an accord checkpoint (bad magic)");
  std::uint32_t v = 0;
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  if (v < oldest_readable || v > version)
    r.fail("checkpoint format version " + std::to_string(v) + ", this build reads versions " +
           std::to_string(oldest_readable) + " to " + std::to_string(version) +
           (v < version ? " only (start the run afresh, or resume it with the build that wrote it)" : ""));
  checkpoint c;
  c.crc = r.check_crc(0);
  char skipped[sizeof magic + sizeof(std::uint32_t)];
  r.exact(skipped, sizeof skipped, "header");
  r.scalar<std::uint32_t>("header");
  c.steps = r.scalar<std::uint64_t>("header");
  c.data_position = r.scalar<std::uint64_t>("header");
  if (c.data_position > max_data_position)
    r.fail("data position " + std::to_string(c.data_position) +
           " is past any a run reaches (2^62 examples): a corrupt or forged checkpoint");
  const auto count = r.scalar<std::uint64_t>("header");
  c.seconds = r.scalar<double>("header");
  c.data_hash = r.scalar<std::uint64_t>("header");
  c.signature = r.text("model signature");
  c.algorithm = r.text("algorithm name");
  c.parameters = r.floats(count, "parameters");
  c.optimizer_step = r.scalar<std::uint64_t>("optimizer state");
  c.slots = r.scalar<std::uint32_t>("optimizer state");
  if (c.slots > max_slots) r.fail("implausible optimizer slot count " + std::to_string(c.slots));
  c.optimizer = r.floats(std::uint64_t{c.slots} * count, "optimizer state");
  const auto momenta = r.scalar<std::uint32_t>("momenta");
  if (momenta > max_momenta || (count > 0 && momenta > size / (count * sizeof(float))))
    r.fail("the momenta claim " + std::to_string(momenta) + " workers, more than the file holds");
  for (std::uint32_t i = 0; i < momenta; ++i) c.momenta.push_back(r.floats(count, "momenta"));
  if (v >= 3) {
    c.feedback = r.text("error-feedback precision");
    if (!c.feedback.empty()) {
      if (!carries_feedback(c.feedback))
        r.fail("unknown error-feedback precision '" + c.feedback + "' (expected " + precision_names(true) + ")");
      const auto residuals = r.scalar<std::uint64_t>("error-feedback residuals");
      if (residuals != count)
        r.fail("the error-feedback residuals (" + c.feedback + ") hold " + std::to_string(residuals) + " values for " +
               std::to_string(count) + " parameters");
      c.residuals = r.floats(count, "error-feedback residuals");
      c.replica = r.floats(count, "error-feedback replica");
    }
  }
  if (v >= 4) {
    const auto workers = r.scalar<std::uint32_t>("topology state");
    if (workers > max_momenta) r.fail("the topology state claims " + std::to_string(workers) + " workers");
    if (workers > 0) c.topology_shared = r.floats(r.scalar<std::uint64_t>("topology state"), "topology's shared values");
    for (std::uint32_t w = 0; w < workers; ++w) {
      checkpoint_topology_worker worker;
      worker.local_step = r.scalar<std::uint64_t>("topology state");
      worker.local_slots = r.scalar<std::uint32_t>("topology state");
      if (worker.local_slots > max_slots) r.fail("implausible local optimizer slot count " + std::to_string(worker.local_slots));
      worker.local_values = r.floats(std::uint64_t{worker.local_slots} * count, "local optimizer state");
      worker.own = r.floats(r.scalar<std::uint64_t>("topology state"), "topology's own values");
      c.topology_workers.push_back(std::move(worker));
    }
  }
  r.expect_end();
  check_values(r, c);
  return c;
}

}  // namespace

void write_checkpoint(const std::string& path, const checkpoint& c) {
  if (!c.feedback.empty() && (c.residuals.size() != c.parameters.size() || c.replica.size() != c.parameters.size()))
    throw std::invalid_argument(path + ": error-feedback residuals and replica must hold one value per parameter");
  for (const checkpoint_topology_worker& worker : c.topology_workers)
    if (worker.local_values.size() != std::size_t{worker.local_slots} * c.parameters.size())
      throw std::invalid_argument(path + ": a worker's local optimizer state must hold one value per parameter and slot");
  const std::string temporary = path + ".tmp";
  {
    writer w(temporary);
    w.bytes(magic, sizeof magic);
    w.scalar<std::uint32_t>(version);
    w.scalar<std::uint32_t>(0);
    w.scalar<std::uint64_t>(c.steps);
    w.scalar<std::uint64_t>(c.data_position);
    w.scalar<std::uint64_t>(c.parameters.size());
    w.scalar<double>(c.seconds);
    w.scalar<std::uint64_t>(c.data_hash);
    w.text(c.signature);
    w.text(c.algorithm);
    w.floats(c.parameters);
    w.scalar<std::uint64_t>(c.optimizer_step);
    w.scalar<std::uint32_t>(c.slots);
    w.floats(c.optimizer);
    w.scalar<std::uint32_t>(static_cast<std::uint32_t>(c.momenta.size()));
    for (const auto& m : c.momenta) w.floats(m);
    w.text(c.feedback);
    if (!c.feedback.empty()) {
      w.scalar<std::uint64_t>(c.residuals.size());
      w.floats(c.residuals);
      w.floats(c.replica);
    }
    w.scalar<std::uint32_t>(static_cast<std::uint32_t>(c.topology_workers.size()));
    if (!c.topology_workers.empty()) {
      w.scalar<std::uint64_t>(c.topology_shared.size());
      w.floats(c.topology_shared);
    }
    for (const checkpoint_topology_worker& worker : c.topology_workers) {
      w.scalar<std::uint64_t>(worker.local_step);
      w.scalar<std::uint32_t>(worker.local_slots);
      w.floats(worker.local_values);
      w.scalar<std::uint64_t>(worker.own.size());
      w.floats(worker.own);
    }
    w.finish();
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error(system_error(path, "cannot move the checkpoint into place"));
  // The rename itself is durable only once the directory is.
  const auto slash = path.rfind('/');
  const std::string directory = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0 || ::fsync(fd) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error(system_error(path, "cannot sync the checkpoint's directory"));
  }
  ::close(fd);
}

checkpoint read_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  struct stat info {};
  if (!in || ::stat(path.c_str(), &info) != 0) throw std::runtime_error(path + ": cannot open the checkpoint");
  if (!S_ISREG(info.st_mode)) throw std::runtime_error(path + ": not a regular file");
  return parse(in, static_cast<std::uint64_t>(info.st_size), path);
}

checkpoint parse_checkpoint(std::string_view bytes, const std::string& name) {
  std::istringstream in{std::string(bytes)};
  return parse(in, bytes.size(), name);
}

void check_checkpoint_path(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode))
    throw std::invalid_argument("checkpoint " + path + ": is a directory");
  const std::string probe = path + ".tmp";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::invalid_argument(system_error("checkpoint " + path, "cannot create a file there"));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace accord
