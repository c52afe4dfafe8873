// Token shards (data/token_shard.hpp) and text as token corpora (data/token_corpus.hpp,
// data/text.hpp): the first byte picks the reader, the second the context length; every split
// is built with the vocabulary the data give and one batch is drawn from each.
#include "data/file_bytes.hpp"
#include "data/text.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const bool shard = data[0] & 1;
  const int context = data[1] % 32;  // 0 is refused; the rest are context lengths
  try {
    auto corpus = std::make_shared<accord::token_corpus>("fuzz");
    std::vector<std::uint8_t> bytes(data + 2, data + size);
    if (shard)
      corpus->add_shard_bytes(std::move(bytes), "fuzz");
    else
      corpus->add_text_bytes(std::move(bytes), "fuzz");
    const int vocab = corpus->largest_token() + 1;
    for (accord::token_split split : {accord::token_split::training, accord::token_split::held_out,
                                      accord::token_split::whole}) {
      const accord::token_dataset tokens(corpus, split, vocab, context, 7);
      (void)tokens.examples(0, 3);
    }
  } catch (const accord::data_error&) {
  }
  return 0;
}
