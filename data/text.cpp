#include "data/text.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/file_bytes.hpp"

namespace accord {
namespace {

// The last tenth is held out; tiny inputs still get at least one evaluation token.
std::size_t train_length(std::size_t total) { return total - std::max<std::size_t>(1, total / 10); }

const char* split_name(token_split split) {
  return split == token_split::training ? "training" : split == token_split::held_out ? "held-out" : "all";
}

std::shared_ptr<const token_corpus> fortunes_corpus() {
  auto corpus = std::make_shared<token_corpus>(default_corpus_directory);
  const std::string text = read_fortunes();
  corpus->add_text_bytes({text.begin(), text.end()}, default_corpus_directory);
  return corpus;
}

}  // namespace

token_dataset::token_dataset(std::shared_ptr<const token_corpus> corpus, token_split split, int vocab_size,
                             int context, std::uint64_t seed)
    : corpus_(std::move(corpus)),
      split_(split),
      vocab_size_(vocab_size),
      context_(context),
      order_([&] {
        const std::string& source = corpus_->source();
        const std::size_t total = corpus_->size();
        if (total == 0) throw data_error(source, "holds no tokens");
        if (context < 1) throw data_error(source, "context " + std::to_string(context) + " must be at least 1");
        const std::size_t cut = train_length(total);
        const std::size_t begin = split == token_split::held_out ? cut : 0;
        const std::size_t end = split == token_split::training ? cut : total;
        std::size_t piece_start = 0, longest = 0;
        std::uint64_t windows = 0;
        for (const token_piece& piece : corpus_->pieces()) {
          const std::size_t first = std::max(begin, piece_start), last = std::min(end, piece_start + piece.count);
          piece_start += piece.count;
          if (first >= last) continue;
          runs_.push_back({&piece, first - (piece_start - piece.count), last - first, tokens_, windows});
          tokens_ += last - first;
          longest = std::max(longest, last - first);
          if (last - first > static_cast<std::size_t>(context)) windows += last - first - static_cast<std::size_t>(context);
        }
        if (windows == 0)
          throw data_error(source, "context " + std::to_string(context) + " longer than the data (" +
                                       (runs_.size() > 1 ? "at most " : "") + std::to_string(longest) +
                                       " tokens" + (runs_.size() > 1 ? " per file" : "") + " in the " +
                                       split_name(split) + " split)");
        return shuffled_order(windows, seed);
      }()) {
  if (corpus_->largest_token() < vocab_size) return;
  for (const token_piece& piece : corpus_->pieces()) {
    if (piece.largest < vocab_size) continue;
    for (std::size_t i = 0; i < piece.count; ++i)
      if (piece[i] >= vocab_size)
        throw data_error(piece.name, "token " + std::to_string(piece[i]) + " at position " + std::to_string(i) +
                                         " is outside the vocabulary of " + std::to_string(vocab_size));
  }
}

std::string token_dataset::describe() const {
  const std::string files = runs_.size() > 1 ? " in " + std::to_string(runs_.size()) + " files" : "";
  return corpus_->source() + " (" + split_name(split_) + (split_ == token_split::whole ? "" : " split") + ": " +
         std::to_string(tokens_) + " tokens" + files + ", context " + std::to_string(context_) + ", vocabulary " +
         std::to_string(vocab_size_) + ")";
}

const token_dataset::run& token_dataset::run_of_window(std::uint64_t window) const {
  // The last run whose windows start at or before `window`: a run without windows shares its
  // count with the next run, so it is never the last such run.
  const auto after = std::upper_bound(runs_.begin(), runs_.end(), window,
                                      [](std::uint64_t w, const run& r) { return w < r.windows_before; });
  return *(after - 1);
}

std::uint64_t token_dataset::window_start(std::uint64_t position) const {
  const std::uint64_t window = order_(position);
  const run& r = run_of_window(window);
  return r.split_offset + (window - r.windows_before);
}

std::uint16_t token_dataset::token(std::size_t index) const {
  const auto after = std::upper_bound(runs_.begin(), runs_.end(), index,
                                      [](std::size_t i, const run& r) { return i < r.split_offset; });
  const run& r = *(after - 1);
  return (*r.piece)[r.first + (index - r.split_offset)];
}

batch token_dataset::examples(std::uint64_t first, std::size_t count) const {
  const std::size_t context = static_cast<std::size_t>(context_);
  batch out;
  out.examples = count;
  out.tokens.resize(count * context);
  out.targets.resize(count * context);
  for (std::size_t e = 0; e < count; ++e) {
    const std::uint64_t window = order_(first + e);
    const run& r = run_of_window(window);
    const token_piece& piece = *r.piece;
    const std::size_t start = r.first + (window - r.windows_before);
    std::int32_t* tokens = out.tokens.data() + e * context;
    std::int32_t* targets = out.targets.data() + e * context;
    for (std::size_t t = 0; t < context; ++t) {
      tokens[t] = piece[start + t];
      targets[t] = piece[start + t + 1];
    }
  }
  return out;
}

token_data load_token_data(const std::string& train_spec, const std::string& eval_spec, int vocab_size, int context,
                           std::uint64_t seed) {
  const auto train = train_spec.empty() ? fortunes_corpus() : open_token_corpus(train_spec);
  const auto eval = eval_spec.empty() ? train : open_token_corpus(eval_spec);
  if (eval->is_text() != train->is_text())
    throw data_error(eval_spec, std::string("holds ") + (eval->is_text() ? "text" : "token shards") +
                                    " but the training data hold " + (train->is_text() ? "text" : "token shards"));
  if (vocab_size == 0)
    vocab_size = train->is_text() ? 256 : std::max(train->largest_token(), eval->largest_token()) + 1;
  if (eval_spec.empty())
    return {std::make_shared<const token_dataset>(train, token_split::training, vocab_size, context, seed),
            std::make_shared<const token_dataset>(train, token_split::held_out, vocab_size, context, seed)};
  return {std::make_shared<const token_dataset>(train, token_split::whole, vocab_size, context, seed),
          std::make_shared<const token_dataset>(eval, token_split::whole, vocab_size, context, seed)};
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

std::shared_ptr<const token_dataset> load_default_corpus(int context, bool train, std::uint64_t seed) {
  return std::make_shared<const token_dataset>(fortunes_corpus(), train ? token_split::training : token_split::held_out,
                                               256, context, seed);
}

}  // namespace accord
