#pragma once
// Token data as the language-model data sets read it: an ordered list of pieces, one per file,
// each a run of little-endian tokens of 1 byte (text: every byte a token) or 2 bytes (llm.c
// token shards). Plain files are memory-mapped, never read whole; gzip-compressed text and
// built corpora are held in memory. Pieces stay where they are for the corpus's lifetime, so
// the training and held-out splits share one copy.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace accord {

struct token_piece {
  std::string name;                   // the file it came from
  const std::uint8_t* bytes = nullptr;
  std::size_t count = 0;              // tokens
  int width = 1;                      // bytes per token: 1 (text) or 2 (token shard)
  std::uint16_t largest = 0;          // largest token in the piece

  std::uint16_t operator[](std::size_t i) const {
    return width == 1 ? bytes[i] : static_cast<std::uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
  }
};

class token_corpus {
public:
  // `source` names the corpus in descriptions and errors (the --data argument).
  explicit token_corpus(std::string source) : source_(std::move(source)) {}

  // A file: an llm.c token shard when its name ends in .bin, else text (gzip is decompressed).
  void add_file(const std::string& path);
  // Bytes already in memory, as a shard or as text; `name` names them in errors.
  void add_shard_bytes(std::vector<std::uint8_t> bytes, const std::string& name);
  void add_text_bytes(std::vector<std::uint8_t> bytes, const std::string& name);

  const std::string& source() const { return source_; }
  const std::vector<token_piece>& pieces() const { return pieces_; }
  std::size_t size() const;        // tokens in all pieces
  int largest_token() const;       // -1 when empty
  bool is_text() const { return pieces_.empty() || pieces_.front().width == 1; }

private:
  void add(std::shared_ptr<const void> owner, std::span<const std::uint8_t> tokens, int width, const std::string& name);

  std::string source_;
  std::vector<token_piece> pieces_;
  std::vector<std::shared_ptr<const void>> owners_;  // mappings and buffers the pieces point into
};

// `spec` is a file, a glob (`shards/train_*.bin`, matched in name order) or a directory (every
// regular file under it in name order, symlinks and binary files — a NUL byte in the first
// 4 KiB of a file not named .bin — skipped). Text files and token shards cannot be mixed.
// Throws data_error naming the spec or the file.
std::shared_ptr<const token_corpus> open_token_corpus(const std::string& spec);

}  // namespace accord
