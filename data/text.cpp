#include "data/text.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/file_bytes.hpp"

namespace accord {
namespace {

constexpr std::int32_t shard_magic = 20240520;
constexpr std::int32_t shard_version = 1;  // uint16 tokens (llm.c's GPT-2 shards)
constexpr std::size_t shard_header_words = 256;

// The last tenth is held out; tiny inputs still get at least one evaluation token.
std::size_t train_length(std::size_t total) { return total - std::max<std::size_t>(1, total / 10); }

std::int32_t little_endian_i32(const std::uint8_t* bytes) {
  return static_cast<std::int32_t>(std::uint32_t{bytes[0]} | (std::uint32_t{bytes[1]} << 8) |
                                   (std::uint32_t{bytes[2]} << 16) |
                                   (std::uint32_t{bytes[3]} << 24));
}

std::vector<std::uint16_t> widen(const std::string& bytes) {
  return {reinterpret_cast<const unsigned char*>(bytes.data()),
          reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size()};
}

}  // namespace

token_dataset::token_dataset(std::string source, const std::vector<std::uint16_t>& tokens,
                             int vocab_size, int context, bool train, std::uint64_t seed)
    : source_(std::move(source)),
      train_(train),
      vocab_size_(vocab_size),
      context_(context),
      split_([&] {
        if (tokens.empty()) throw data_error(source_, "holds no tokens");
        const std::size_t cut = train_length(tokens.size());
        return train ? std::vector<std::uint16_t>(tokens.begin(), tokens.begin() + cut)
                     : std::vector<std::uint16_t>(tokens.begin() + cut, tokens.end());
      }()),
      order_([&] {
        if (context < 1) throw data_error(source_, "context " + std::to_string(context) +
                                                       " must be at least 1");
        if (static_cast<std::size_t>(context) + 1 > split_.size())
          throw data_error(source_, "context " + std::to_string(context) +
                                        " longer than the data (" +
                                        std::to_string(split_.size()) + " tokens in the " +
                                        (train ? "training" : "held-out") + " split)");
        return shuffled_order(split_.size() - static_cast<std::size_t>(context), seed);
      }()) {
  const auto outside = std::find_if(tokens.begin(), tokens.end(),
                                    [&](std::uint16_t token) { return token >= vocab_size; });
  if (outside != tokens.end())
    throw data_error(source_, "token " + std::to_string(*outside) + " at position " +
                                  std::to_string(outside - tokens.begin()) +
                                  " is outside the vocabulary of " + std::to_string(vocab_size));
}

std::string token_dataset::describe() const {
  return source_ + " (" + (train_ ? "training" : "held-out") + " split: " +
         std::to_string(split_.size()) + " tokens, context " + std::to_string(context_) +
         ", vocabulary " + std::to_string(vocab_size_) + ")";
}

batch token_dataset::examples(std::uint64_t first, std::size_t count) const {
  const std::size_t context = static_cast<std::size_t>(context_);
  batch out;
  out.examples = count;
  out.tokens.resize(count * context);
  out.targets.resize(count * context);
  for (std::size_t e = 0; e < count; ++e) {
    const std::uint16_t* window = split_.data() + order_(first + e);
    std::int32_t* tokens = out.tokens.data() + e * context;
    std::int32_t* targets = out.targets.data() + e * context;
    for (std::size_t t = 0; t < context; ++t) {
      tokens[t] = window[t];
      targets[t] = window[t + 1];
    }
  }
  return out;
}

std::shared_ptr<const token_dataset> load_text_file(const std::string& path, int context,
                                                    bool train, std::uint64_t seed) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  return std::make_shared<const token_dataset>(
      path, std::vector<std::uint16_t>(bytes.begin(), bytes.end()), 256, context, train, seed);
}

std::shared_ptr<const token_dataset> load_token_shard(const std::string& path, int context,
                                                      int vocab_size, bool train,
                                                      std::uint64_t seed) {
  const std::vector<std::uint8_t> bytes = read_file_bytes(path);
  const std::size_t header_bytes = shard_header_words * 4;
  if (bytes.size() < header_bytes)
    throw data_error(path, "truncated token shard header (" + std::to_string(bytes.size()) +
                               " of " + std::to_string(header_bytes) + " bytes)");
  const std::int32_t magic = little_endian_i32(bytes.data());
  const std::int32_t version = little_endian_i32(bytes.data() + 4);
  const std::int32_t count = little_endian_i32(bytes.data() + 8);
  if (magic != shard_magic)
    throw data_error(path, "wrong token shard magic " + std::to_string(magic) + " (expected " +
                               std::to_string(shard_magic) + ")");
  if (version != shard_version)
    throw data_error(path, "unsupported token shard version " + std::to_string(version) +
                               " (expected " + std::to_string(shard_version) +
                               ", uint16 tokens)");
  if (count < 0) throw data_error(path, "negative token count " + std::to_string(count));
  const std::size_t payload = bytes.size() - header_bytes;
  const std::size_t expected = static_cast<std::size_t>(count) * 2;
  if (payload < expected)
    throw data_error(path, "truncated: header promises " + std::to_string(count) +
                               " tokens, file holds " + std::to_string(payload / 2));
  if (payload > expected)
    throw data_error(path, std::to_string(payload - expected) +
                               " unexpected bytes after the tokens");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::uint8_t* token = bytes.data() + header_bytes + 2 * i;
    tokens[i] = static_cast<std::uint16_t>(token[0] | (token[1] << 8));
  }
  return std::make_shared<const token_dataset>(path, tokens, vocab_size, context, train, seed);
}

std::string read_fortunes(const std::string& directory) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    if (entry.is_symlink() || !entry.is_regular_file() || entry.path().extension() == ".dat")
      continue;
    files.push_back(entry.path());
  }
  if (error) throw data_error(directory, error.message() + " (install Debian's fortunes package)");
  if (files.empty())
    throw data_error(directory, "no fortune files (install Debian's fortunes package)");
  std::sort(files.begin(), files.end());

  std::string corpus;
  for (const fs::path& file : files) {
    const std::vector<std::uint8_t> bytes = read_file_bytes(file.string());
    std::size_t line_start = 0;
    while (line_start < bytes.size()) {
      const auto newline = std::find(bytes.begin() + line_start, bytes.end(), '\n');
      const std::size_t line_end = static_cast<std::size_t>(newline - bytes.begin());
      const bool separator = line_end - line_start == 1 && bytes[line_start] == '%';
      if (!separator) corpus.append(bytes.begin() + line_start, bytes.begin() + line_end);
      corpus.push_back('\n');
      line_start = line_end + 1;
    }
  }
  return corpus;
}

std::shared_ptr<const token_dataset> load_default_corpus(int context, bool train,
                                                         std::uint64_t seed) {
  return std::make_shared<const token_dataset>(default_corpus_directory,
                                               widen(read_fortunes()), 256, context, train,
                                               seed);
}

}  // namespace accord
