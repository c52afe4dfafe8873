#pragma once
// llm.c token shards: 256 little-endian int32 header words (magic 20240520, version 1, token
// count), then exactly that many little-endian uint16 tokens. `name` names the source in
// errors (data_error). Token values are checked against the vocabulary by token_dataset.
#include <cstdint>
#include <span>
#include <string>

namespace accord {

// The shard's token bytes (2 per token), a view into `bytes` after the header has been checked.
std::span<const std::uint8_t> token_shard_payload(std::span<const std::uint8_t> bytes, const std::string& name);

}  // namespace accord
