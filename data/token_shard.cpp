#include "data/token_shard.hpp"

#include "data/file_bytes.hpp"

namespace accord {
namespace {

constexpr std::int32_t shard_magic = 20240520;
constexpr std::int32_t shard_version = 1;  // uint16 tokens (llm.c's GPT-2 shards)
constexpr std::size_t shard_header_words = 256;

std::int32_t little_endian_i32(const std::uint8_t* bytes) {
  return static_cast<std::int32_t>(std::uint32_t{bytes[0]} | (std::uint32_t{bytes[1]} << 8) |
                                   (std::uint32_t{bytes[2]} << 16) |
                                   (std::uint32_t{bytes[3]} << 24));
}

}  // namespace

std::span<const std::uint8_t> token_shard_payload(std::span<const std::uint8_t> bytes, const std::string& path) {
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
  return bytes.subspan(header_bytes, expected);
}

}  // namespace accord
