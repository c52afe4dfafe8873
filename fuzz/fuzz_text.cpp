// Token shards (data/token_shard.hpp) and text files as token streams (data/text.hpp): the
// first byte picks the reader, the second the context length; both splits are built and one
// batch is drawn from each.
#include "data/file_bytes.hpp"
#include "data/text.hpp"
#include "data/token_shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool shard = data[0] & 1;
  const int context = data[1] % 32;  // 0 is refused; the rest are context lengths
  const std::vector<std::uint8_t> bytes(data + 2, data + size);
  try {
    const std::vector<std::uint16_t> tokens =
        shard ? accord::parse_token_shard(bytes, "fuzz") : std::vector<std::uint16_t>(bytes.begin(), bytes.end());
    for (bool train : {true, false}) {
      const accord::token_dataset split("fuzz", tokens, shard ? 50257 : 256, context, train, 7);
      (void)split.examples(0, 3);
    }
  } catch (const accord::data_error&) {
  }
  return 0;
}
