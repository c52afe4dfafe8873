#pragma once
// Token streams for language models: any file read as bytes (vocabulary 256), llm.c `.bin`
// token shards, and the default corpus (Debian's `fortunes` package).
//
// The tokens are split once: the last tenth is the held-out (evaluation) split, the rest is the
// training split. An example is a window of context+1 consecutive tokens of one split:
// `tokens` are its first `context`, `targets` the same shifted by one. Stream position p picks
// window start shuffled_order(windows, seed)(p), so one epoch visits every window start once.
#include <accord/model.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/shuffle.hpp"

namespace accord {

// Where Debian's fortunes package installs its English text.
inline constexpr const char* default_corpus_directory = "/usr/share/games/fortunes";

class token_dataset final : public dataset {
public:
  // `tokens` is the whole file; `source` names it in errors and descriptions. Throws
  // data_error if the chosen split is shorter than context+1 tokens or a token >= vocab_size.
  token_dataset(std::string source, const std::vector<std::uint16_t>& tokens, int vocab_size,
                int context, bool train, std::uint64_t seed);

  std::string describe() const override;
  // Distinct windows: split length - context.
  std::uint64_t size() const override { return order_.size(); }
  batch examples(std::uint64_t first, std::size_t count) const override;

  int vocab_size() const { return vocab_size_; }
  int context() const { return context_; }
  // The split's tokens, and where stream position `position`'s window starts in them.
  const std::vector<std::uint16_t>& split_tokens() const { return split_; }
  std::uint64_t window_start(std::uint64_t position) const { return order_(position); }

private:
  std::string source_;
  bool train_;
  int vocab_size_;
  int context_;
  std::vector<std::uint16_t> split_;
  shuffled_order order_;
};

// Any file as bytes (gzip-compressed files are decompressed first); vocabulary 256.
std::shared_ptr<const token_dataset> load_text_file(const std::string& path, int context,
                                                    bool train, std::uint64_t seed);

// An llm.c token shard: 256 little-endian int32 header words (magic 20240520, version 1, token
// count), then that many uint16 tokens. Every token must be < vocab_size (GPT-2: 50257).
std::shared_ptr<const token_dataset> load_token_shard(const std::string& path, int context,
                                                      int vocab_size, bool train,
                                                      std::uint64_t seed);

// The default corpus as bytes: every regular, non-symlink, non-`.dat` file directly in
// `directory`, in name order, concatenated. Lines holding only `%` (fortune separators) become
// empty lines, so fortunes stay apart without teaching the model a marker.
std::string read_fortunes(const std::string& directory = default_corpus_directory);

std::shared_ptr<const token_dataset> load_default_corpus(int context, bool train,
                                                         std::uint64_t seed);

}  // namespace accord
