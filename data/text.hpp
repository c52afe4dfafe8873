#pragma once
// Token streams for language models: text (every byte a token, vocabulary 256), llm.c `.bin`
// token shards (vocabulary up to 65536), and the default corpus (Debian's `fortunes` package).
//
// Without separate held-out data the corpus is split once: the last tenth of its tokens is the
// held-out (evaluation) split, the rest is the training split. An example is a window of
// context+1 consecutive tokens of one split inside one file (windows never span two files):
// `tokens` are its first `context`, `targets` the same shifted by one. Stream position p picks
// window shuffled_order(windows, seed)(p), so one epoch visits every window once.
#include <accord/model.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shuffle.hpp"
#include "data/token_corpus.hpp"

namespace accord {

// Where Debian's fortunes package installs its English text.
inline constexpr const char* default_corpus_directory = "/usr/share/games/fortunes";

enum class token_split { training, held_out, whole };

class token_dataset final : public dataset {
public:
  // Throws data_error if the corpus is empty, no file of the split holds context+1 tokens, or
  // a token of the corpus is >= vocab_size.
  token_dataset(std::shared_ptr<const token_corpus> corpus, token_split split, int vocab_size, int context,
                std::uint64_t seed);

  std::string describe() const override;
  // Distinct windows: per file of the split, its length - context.
  std::uint64_t size() const override { return order_.size(); }
  batch examples(std::uint64_t first, std::size_t count) const override;

  int vocab_size() const { return vocab_size_; }
  int context() const { return context_; }
  // The split's tokens, its files one after another, and where stream position `position`'s
  // window starts among them.
  std::size_t token_count() const { return tokens_; }
  std::uint16_t token(std::size_t index) const;
  std::uint64_t window_start(std::uint64_t position) const;

private:
  // The part of one file that lies in the split.
  struct run {
    const token_piece* piece;
    std::size_t first;            // in the piece
    std::size_t count;
    std::size_t split_offset;     // tokens of the split before it
    std::uint64_t windows_before; // windows of the split before it
  };
  const run& run_of_window(std::uint64_t window) const;

  std::shared_ptr<const token_corpus> corpus_;
  token_split split_;
  int vocab_size_;
  int context_;
  std::vector<run> runs_;
  std::size_t tokens_ = 0;
  shuffled_order order_;
};

struct token_data {
  std::shared_ptr<const token_dataset> train, eval;
};

// The training and held-out sets of a language model. `train_spec`: a file, glob or directory
// (open_token_corpus; empty: the default corpus); `eval_spec`: the held-out data the same way
// (empty: the last tenth of the training data). `vocab_size` 0 takes the vocabulary from the
// data: 256 for text, the largest token + 1 for token shards. Each file is opened once.
token_data load_token_data(const std::string& train_spec, const std::string& eval_spec, int vocab_size, int context,
                           std::uint64_t seed);

// The default corpus as bytes: every regular, non-symlink, non-`.dat` file directly in
// `directory`, in name order, concatenated. Lines holding only `%` (fortune separators) become
// empty lines, so fortunes stay apart without teaching the model a marker.
std::string read_fortunes(const std::string& directory = default_corpus_directory);

std::shared_ptr<const token_dataset> load_default_corpus(int context, bool train, std::uint64_t seed);

}  // namespace accord
