#include "data/text.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/file_bytes.hpp"
#include "data/token_shard.hpp"

namespace accord {
namespace {

// The last tenth is held out; tiny inputs still get at least one evaluation token.
std::size_t train_length(std::size_t total) { return total - std::max<std::size_t>(1, total / 10); }

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
  return std::make_shared<const token_dataset>(path, parse_token_shard(read_file_bytes(path), path), vocab_size,
                                               context, train, seed);
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
