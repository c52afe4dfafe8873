#include "actors/checkpoint.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace accord {
namespace {

constexpr char magic[8] = {'A', 'C', 'C', 'O', 'R', 'D', 'C', 'K'};
constexpr std::uint32_t version = 1;
// Guards against absurd sizes from a corrupt header before anything is allocated.
constexpr std::uint64_t max_elements = 1ull << 36;

class writer {
public:
  explicit writer(const std::string& path) : out_(path, std::ios::binary | std::ios::trunc) {}
  template <class T>
  void scalar(T value) { out_.write(reinterpret_cast<const char*>(&value), sizeof value); }
  void text(const std::string& s) {
    scalar<std::uint32_t>(static_cast<std::uint32_t>(s.size()));
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
  }
  void floats(const std::vector<float>& v) {
    out_.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  }
  void bytes(const char* data, std::size_t n) { out_.write(data, static_cast<std::streamsize>(n)); }
  bool ok() { out_.flush(); return static_cast<bool>(out_); }

private:
  std::ofstream out_;
};

class reader {
public:
  explicit reader(const std::string& path) : path_(path), in_(path, std::ios::binary | std::ios::ate) {
    if (!in_) fail("cannot open the checkpoint");
    size_ = static_cast<std::uint64_t>(in_.tellg());
    in_.seekg(0);
  }
  [[noreturn]] void fail(const std::string& problem) const { throw std::runtime_error(path_ + ": " + problem); }
  void exact(char* into, std::size_t n, const char* what) {
    in_.read(into, static_cast<std::streamsize>(n));
    if (static_cast<std::size_t>(in_.gcount()) != n) fail(std::string("truncated checkpoint (in the ") + what + ")");
  }
  template <class T>
  T scalar(const char* what) {
    T value;
    exact(reinterpret_cast<char*>(&value), sizeof value, what);
    return value;
  }
  std::string text(const char* what) {
    const auto n = scalar<std::uint32_t>(what);
    if (n > 1u << 20) fail(std::string("implausible length of the ") + what);
    std::string s(n, '\0');
    exact(s.data(), n, what);
    return s;
  }
  std::vector<float> floats(std::uint64_t n, const char* what) {
    if (n > max_elements) fail(std::string("implausible size of the ") + what);
    // A claimed size is checked against the file before anything is allocated.
    const std::uint64_t left = size_ - static_cast<std::uint64_t>(in_.tellg());
    if (n > left / sizeof(float)) fail(std::string("truncated checkpoint (in the ") + what + ")");
    std::vector<float> v(n);
    exact(reinterpret_cast<char*>(v.data()), n * sizeof(float), what);
    return v;
  }
  void expect_end() {
    if (in_.peek() != std::char_traits<char>::eof()) fail("unexpected bytes after the checkpoint's end");
  }

private:
  std::string path_;
  std::ifstream in_;
  std::uint64_t size_ = 0;
};

}  // namespace

void write_checkpoint(const std::string& path, const checkpoint& c) {
  const std::string temporary = path + ".tmp";
  {
    writer w(temporary);
    w.bytes(magic, sizeof magic);
    w.scalar<std::uint32_t>(version);
    w.scalar<std::uint32_t>(0);
    w.scalar<std::uint64_t>(c.steps);
    w.scalar<std::uint64_t>(c.data_position);
    w.scalar<std::uint64_t>(c.parameters.size());
    w.text(c.signature);
    w.text(c.algorithm);
    w.floats(c.parameters);
    w.scalar<std::uint64_t>(c.optimizer_step);
    w.scalar<std::uint32_t>(c.slots);
    w.floats(c.optimizer);
    w.scalar<std::uint32_t>(static_cast<std::uint32_t>(c.momenta.size()));
    for (const auto& m : c.momenta) w.floats(m);
    if (!w.ok()) throw std::runtime_error(path + ": cannot write the checkpoint");
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw std::runtime_error(path + ": cannot move the checkpoint into place");
}

checkpoint read_checkpoint(const std::string& path) {
  reader r(path);
  char head[sizeof magic];
  r.exact(head, sizeof head, "magic");
  if (std::memcmp(head, magic, sizeof magic) != 0) r.fail("not an accord checkpoint (bad magic)");
  const auto v = r.scalar<std::uint32_t>("version");
  if (v != version) r.fail("checkpoint version " + std::to_string(v) + ", expected " + std::to_string(version));
  r.scalar<std::uint32_t>("header");
  checkpoint c;
  c.steps = r.scalar<std::uint64_t>("header");
  c.data_position = r.scalar<std::uint64_t>("header");
  const auto count = r.scalar<std::uint64_t>("header");
  c.signature = r.text("model signature");
  c.algorithm = r.text("algorithm name");
  c.parameters = r.floats(count, "parameters");
  c.optimizer_step = r.scalar<std::uint64_t>("optimizer state");
  c.slots = r.scalar<std::uint32_t>("optimizer state");
  if (c.slots > 8) r.fail("implausible optimizer slot count " + std::to_string(c.slots));
  c.optimizer = r.floats(std::uint64_t{c.slots} * count, "optimizer state");
  const auto momenta = r.scalar<std::uint32_t>("momenta");
  if (momenta > 1u << 16) r.fail("implausible momentum count " + std::to_string(momenta));
  for (std::uint32_t i = 0; i < momenta; ++i) c.momenta.push_back(r.floats(count, "momenta"));
  r.expect_end();
  return c;
}

}  // namespace accord
