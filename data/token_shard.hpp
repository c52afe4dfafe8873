#pragma once
// llm.c token shards parsed from bytes already read: 256 little-endian int32 header words
// (magic 20240520, version 1, token count), then exactly that many little-endian uint16 tokens.
// `name` names the source in errors (data_error). Token values are checked by token_dataset.
#include <cstdint>
#include <string>
#include <vector>

namespace accord {

std::vector<std::uint16_t> parse_token_shard(const std::vector<std::uint8_t>& bytes, const std::string& name);

}  // namespace accord
