#include "data/token_corpus.hpp"

#include "data/file_bytes.hpp"
#include "data/mapped_file.hpp"
#include "data/token_shard.hpp"

#include <algorithm>
#include <filesystem>
#include <glob.h>

namespace accord {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_gzip(std::span<const std::uint8_t> bytes) { return bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b; }

// How much of a file is looked at to tell text from binary.
constexpr std::size_t sniffed_bytes = 4096;

bool looks_binary(const std::string& path) {
  const mapped_file file(path);
  const auto head = file.bytes().first(std::min(sniffed_bytes, file.bytes().size()));
  return !is_gzip(head) && std::find(head.begin(), head.end(), 0) != head.end();
}

std::vector<std::string> glob_matches(const std::string& pattern) {
  glob_t found{};
  const int status = ::glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  ::globfree(&found);
  if (status == GLOB_NOMATCH) throw data_error(pattern, "matches no file");
  if (status != 0) throw data_error(pattern, "cannot be searched (out of memory)");  // GLOB_NOSPACE
  return paths;  // glob sorts them
}

std::vector<std::string> directory_files(const std::string& directory) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code error;
  for (fs::recursive_directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    if (it->is_symlink() || !it->is_regular_file()) continue;
    const std::string path = it->path().string();
    if (ends_with(path, ".bin") || !looks_binary(path)) paths.push_back(path);
  }
  if (error) throw data_error(directory, error.message());
  if (paths.empty()) throw data_error(directory, "holds no text files or .bin token shards");
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

void token_corpus::add(std::shared_ptr<const void> owner, std::span<const std::uint8_t> tokens, int width,
                       const std::string& name) {
  if (!pieces_.empty() && pieces_.front().width != width)
    throw data_error(name, std::string("is ") + (width == 1 ? "text" : "a token shard") + " but " +
                               pieces_.front().name + " is " + (width == 1 ? "a token shard" : "text") +
                               ": one corpus holds one or the other");
  token_piece piece{name, tokens.data(), tokens.size() / static_cast<std::size_t>(width), width, 0};
  // One pass over the tokens now, so the vocabulary is known without reading them again.
  if (width == 1) {
    piece.largest = tokens.empty() ? 0 : *std::max_element(tokens.begin(), tokens.end());
  } else {
    for (std::size_t i = 0; i < piece.count; ++i) piece.largest = std::max(piece.largest, piece[i]);
  }
  pieces_.push_back(std::move(piece));
  owners_.push_back(std::move(owner));
}

void token_corpus::add_file(const std::string& path) {
  auto file = std::make_shared<const mapped_file>(path);
  const std::span<const std::uint8_t> bytes = file->bytes();
  if (ends_with(path, ".bin")) {
    add(file, token_shard_payload(bytes, path), 2, path);
  } else if (is_gzip(bytes)) {
    add_text_bytes(read_file_bytes(path), path);
  } else {
    add(file, bytes, 1, path);
  }
}

void token_corpus::add_shard_bytes(std::vector<std::uint8_t> bytes, const std::string& name) {
  auto owner = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  add(owner, token_shard_payload(*owner, name), 2, name);
}

void token_corpus::add_text_bytes(std::vector<std::uint8_t> bytes, const std::string& name) {
  auto owner = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  add(owner, *owner, 1, name);
}

std::size_t token_corpus::size() const {
  std::size_t total = 0;
  for (const token_piece& piece : pieces_) total += piece.count;
  return total;
}

int token_corpus::largest_token() const {
  int largest = -1;
  for (const token_piece& piece : pieces_)
    if (piece.count > 0) largest = std::max<int>(largest, piece.largest);
  return largest;
}

std::shared_ptr<const token_corpus> open_token_corpus(const std::string& spec) {
  auto corpus = std::make_shared<token_corpus>(spec);
  std::vector<std::string> paths;
  if (spec.find_first_of("*?[") != std::string::npos)
    paths = glob_matches(spec);
  else if (std::filesystem::is_directory(spec))
    paths = directory_files(spec);
  else
    paths = {spec};
  for (const std::string& path : paths) corpus->add_file(path);
  return corpus;
}

}  // namespace accord
