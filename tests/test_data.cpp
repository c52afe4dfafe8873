#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "data/fashion_mnist.hpp"
#include "data/file_bytes.hpp"
#include "data/shuffle.hpp"
#include "data/text.hpp"

namespace fs = std::filesystem;
using namespace accord;

namespace {

// A fresh directory under the system temp dir, removed at the end of the test case.
struct temp_dir {
  fs::path path;
  temp_dir() {
    path = fs::temp_directory_path() /
           ("accord_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~temp_dir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int value = 0;
    return value;
  }
};

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(file);
}

void put_big_endian(std::vector<std::uint8_t>& out, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(value >> shift));
}

void put_little_endian(std::vector<std::uint8_t>& out, std::uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<std::uint8_t>(value >> shift));
}

// IDX images: pixel (e, i) = (e * 7 + i) % 256, so every example is recognisable.
std::vector<std::uint8_t> idx_images(std::uint32_t magic, std::uint32_t count, std::uint32_t rows,
                                     std::uint32_t cols) {
  std::vector<std::uint8_t> out;
  put_big_endian(out, magic);
  put_big_endian(out, count);
  put_big_endian(out, rows);
  put_big_endian(out, cols);
  for (std::uint32_t e = 0; e < count; ++e)
    for (std::uint32_t i = 0; i < rows * cols; ++i) out.push_back(static_cast<std::uint8_t>((e * 7 + i) % 256));
  return out;
}

std::vector<std::uint8_t> idx_labels(std::uint32_t magic, std::uint32_t count) {
  std::vector<std::uint8_t> out;
  put_big_endian(out, magic);
  put_big_endian(out, count);
  for (std::uint32_t e = 0; e < count; ++e) out.push_back(static_cast<std::uint8_t>(e % 10));
  return out;
}

std::vector<std::uint8_t> token_shard(std::uint32_t magic, std::uint32_t version,
                                      std::uint32_t count, const std::vector<std::uint16_t>& tokens) {
  std::vector<std::uint8_t> out;
  put_little_endian(out, magic);
  put_little_endian(out, version);
  put_little_endian(out, count);
  out.resize(256 * 4, 0);
  for (std::uint16_t t : tokens) {
    out.push_back(static_cast<std::uint8_t>(t & 0xff));
    out.push_back(static_cast<std::uint8_t>(t >> 8));
  }
  return out;
}

// Stream positions of the first `batches` micro-batches of one worker.
std::vector<std::uint64_t> positions_of(const micro_batch_stream& stream, std::uint64_t batches) {
  std::vector<std::uint64_t> out;
  for (std::uint64_t k = 0; k < batches; ++k)
    for (std::size_t j = 0; j < stream.size; ++j) out.push_back(stream.first_position(k) + j);
  return out;
}

}  // namespace

TEST_CASE("shuffled_order is a seeded permutation per epoch") {
  for (std::uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 1000ull, 4097ull}) {
    const shuffled_order order(n, 42);
    for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<int> seen(n, 0);
      for (std::uint64_t p = epoch * n; p < (epoch + 1) * n; ++p) {
        const std::uint64_t index = order(p);
        REQUIRE(index < n);
        ++seen[index];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
    }
  }
  const std::uint64_t n = 1000;
  const shuffled_order a(n, 1), same(n, 1), other(n, 2);
  int moved = 0, differs_from_other_seed = 0, differs_next_epoch = 0;
  for (std::uint64_t p = 0; p < n; ++p) {
    CHECK(a(p) == same(p));
    moved += a(p) != p;
    differs_from_other_seed += a(p) != other(p);
    differs_next_epoch += a(p) != a(p + n);
  }
  // A uniform random permutation has ~1 fixed point and agrees with another in ~1 place.
  CHECK(moved > 980);
  CHECK(differs_from_other_seed > 980);
  CHECK(differs_next_epoch > 980);
  CHECK_THROWS_AS(shuffled_order(0, 1), std::invalid_argument);
}

TEST_CASE("micro_batch_stream gives workers disjoint positions whose union is contiguous") {
  const int world = 3;
  const std::uint64_t batches = 20;
  std::vector<std::uint64_t> all;
  for (int rank = 0; rank < world; ++rank) {
    const auto mine = positions_of({rank, world, 4}, batches);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  REQUIRE(all.size() == batches * world * 4);
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == i);
  // One worker with world*size per micro-batch sees the same union.
  CHECK(positions_of({0, 1, 12}, batches) == all);
}

TEST_CASE("real Fashion-MNIST loads with the right counts, labels and features") {
  for (const bool train : {true, false}) {
    const auto data = load_fashion_mnist(default_fashion_mnist_directory, train, 7);
    const std::uint64_t n = train ? 60000 : 10000;
    REQUIRE(data->size() == n);
    REQUIRE(data->feature_count() == 784);
    CHECK(data->describe().find("28x28") != std::string::npos);

    std::array<std::uint64_t, 10> stored{}, streamed{};
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(data->label(i) >= 0);
      REQUIRE(data->label(i) < 10);
      ++stored[static_cast<std::size_t>(data->label(i))];
    }
    // Fashion-MNIST is balanced: every class has a tenth of the examples.
    for (std::uint64_t count : stored) CHECK(count == n / 10);

    // One epoch of the stream, in micro-batches, shows every example once.
    std::vector<char> seen(n, 0);
    float lowest = 1.0f, highest = 0.0f;
    double sum = 0.0;
    const std::size_t chunk = 1000;
    for (std::uint64_t first = 0; first < n; first += chunk) {
      const batch b = data->examples(first, chunk);
      REQUIRE(b.examples == chunk);
      REQUIRE(b.features.size() == chunk * 784);
      REQUIRE(b.targets.size() == chunk);
      for (std::size_t e = 0; e < chunk; ++e) {
        const std::uint64_t index = data->index_at(first + e);
        REQUIRE(index < n);
        CHECK_FALSE(seen[index]);
        seen[index] = 1;
        CHECK(b.targets[e] == data->label(index));
        ++streamed[static_cast<std::size_t>(b.targets[e])];
      }
      for (float f : b.features) {
        lowest = std::min(lowest, f);
        highest = std::max(highest, f);
        sum += f;
      }
    }
    CHECK(streamed == stored);
    CHECK(lowest == 0.0f);
    CHECK(highest == 1.0f);
    // Fashion-MNIST's mean pixel intensity is about 0.286.
    CHECK(sum / static_cast<double>(n * 784) == doctest::Approx(0.286).epsilon(0.02));
  }
}

TEST_CASE("Fashion-MNIST streams are deterministic and seeded") {
  const auto a = load_fashion_mnist(default_fashion_mnist_directory, false, 3);
  const auto same = load_fashion_mnist(default_fashion_mnist_directory, false, 3);
  const auto other = load_fashion_mnist(default_fashion_mnist_directory, false, 4);
  const batch x = a->examples(12345, 16), y = same->examples(12345, 16), z = other->examples(12345, 16);
  CHECK(x.features == y.features);
  CHECK(x.targets == y.targets);
  CHECK(x.features != z.features);
  // Batches are views of positions: a batch equals the concatenation of its parts.
  const batch head = a->examples(12345, 10), tail = a->examples(12355, 6);
  std::vector<float> joined = head.features;
  joined.insert(joined.end(), tail.features.begin(), tail.features.end());
  CHECK(joined == x.features);
}

TEST_CASE("IDX readers accept gzip and plain files and reject malformed ones") {
  const temp_dir dir;
  const std::string images = dir.file("images"), labels = dir.file("labels");

  SUBCASE("well-formed, gzip-compressed and plain") {
    write_gzip(images, idx_images(2051, 12, 2, 3));
    write_bytes(labels, idx_labels(2049, 12));
    const idx_classification data(images, labels, 1);
    REQUIRE(data.size() == 12);
    REQUIRE(data.feature_count() == 6);
    const batch b = data.examples(0, 12);
    for (std::size_t e = 0; e < 12; ++e) {
      const std::uint64_t index = data.index_at(e);
      CHECK(b.targets[e] == static_cast<int>(index % 10));
      for (std::size_t i = 0; i < 6; ++i)
        CHECK(b.features[e * 6 + i] == static_cast<float>((index * 7 + i) % 256) / 255.0f);
    }
  }
  SUBCASE("load_fashion_mnist falls back to uncompressed files") {
    write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_images(2051, 5, 28, 28));
    write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_labels(2049, 5));
    CHECK(load_fashion_mnist(dir.path.string(), false, 1)->size() == 5);
  }
  SUBCASE("missing file") {
    write_bytes(labels, idx_labels(2049, 3));
    CHECK_THROWS_WITH_AS(idx_classification(dir.file("absent"), labels, 1),
                         (dir.file("absent") + ": No such file or directory").c_str(), data_error);
    CHECK_THROWS_WITH_AS(load_fashion_mnist(dir.path.string(), true, 1),
                         (dir.file("train-images-idx3-ubyte.gz") + ": No such file or directory").c_str(),
                         data_error);
  }
  SUBCASE("wrong magic") {
    write_bytes(images, idx_images(2049, 3, 2, 2));
    write_bytes(labels, idx_labels(2049, 3));
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (images + ": wrong IDX magic 2049 (expected 2051 for images)").c_str(),
                         data_error);
    write_bytes(images, idx_images(2051, 3, 2, 2));
    write_bytes(labels, idx_labels(2051, 3));
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (labels + ": wrong IDX magic 2051 (expected 2049 for labels)").c_str(),
                         data_error);
  }
  SUBCASE("truncated data and header") {
    std::vector<std::uint8_t> bytes = idx_images(2051, 3, 2, 2);
    bytes.resize(bytes.size() - 1);
    write_bytes(images, bytes);
    write_bytes(labels, idx_labels(2049, 3));
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (images + ": truncated: header promises 12 data bytes, file holds 11").c_str(),
                         data_error);
    write_bytes(images, {0, 0, 8, 3, 0});
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (images + ": truncated IDX header (5 bytes)").c_str(), data_error);
  }
  SUBCASE("truncated gzip stream") {
    const std::string whole = dir.file("whole.gz");
    write_gzip(whole, idx_images(2051, 50, 28, 28));
    std::ifstream in(whole, std::ios::binary);
    std::vector<std::uint8_t> compressed((std::istreambuf_iterator<char>(in)), {});
    compressed.resize(compressed.size() / 2);
    write_bytes(images, compressed);
    write_bytes(labels, idx_labels(2049, 50));
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (images + ": truncated gzip stream").c_str(), data_error);
  }
  SUBCASE("trailing bytes") {
    std::vector<std::uint8_t> bytes = idx_labels(2049, 3);
    bytes.push_back(0);
    write_bytes(images, idx_images(2051, 3, 2, 2));
    write_bytes(labels, bytes);
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (labels + ": 1 unexpected bytes after the data").c_str(), data_error);
  }
  SUBCASE("image and label counts differ") {
    write_bytes(images, idx_images(2051, 4, 2, 2));
    write_bytes(labels, idx_labels(2049, 3));
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (labels + ": 3 labels but " + images + " holds 4 images").c_str(),
                         data_error);
  }
  SUBCASE("label outside the classes") {
    std::vector<std::uint8_t> bytes = idx_labels(2049, 3);
    bytes.back() = 10;
    write_bytes(images, idx_images(2051, 3, 2, 2));
    write_bytes(labels, bytes);
    CHECK_THROWS_WITH_AS(idx_classification(images, labels, 1),
                         (labels + ": label 10 of example 2 is not a class 0..9").c_str(),
                         data_error);
  }
}

// One split of the corpus at `spec`, as accord-train opens it.
std::shared_ptr<const token_dataset> split_of(const std::string& spec, token_split split, int context,
                                              std::uint64_t seed, int vocab = 256) {
  return std::make_shared<const token_dataset>(open_token_corpus(spec), split, vocab, context, seed);
}

TEST_CASE("text windows come from the file with targets shifted by one") {
  const temp_dir dir;
  const std::string path = dir.file("text.txt");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "line " + std::to_string(i) + ": all work and no play\n";
  write_bytes(path, {text.begin(), text.end()});
  const int context = 16;
  const std::size_t held_out = text.size() / 10, train_tokens = text.size() - held_out;

  for (const bool train : {true, false}) {
    const token_split split_kind = train ? token_split::training : token_split::held_out;
    const auto data = split_of(path, split_kind, context, 9);
    const std::size_t offset = train ? 0 : train_tokens;
    const std::size_t split = train ? train_tokens : held_out;
    REQUIRE(data->vocab_size() == 256);
    REQUIRE(data->size() == split - context);
    REQUIRE(data->token_count() == split);
    const std::size_t n = data->size();
    const batch b = data->examples(0, n);
    REQUIRE(b.tokens.size() == n * context);
    REQUIRE(b.targets.size() == n * context);
    std::vector<int> seen(n, 0);
    for (std::size_t e = 0; e < n; ++e) {
      const std::uint64_t start = data->window_start(e);
      REQUIRE(start + context < split + 1);
      ++seen[start];
      for (int t = 0; t < context; ++t) {
        CHECK(b.tokens[e * context + t] == static_cast<unsigned char>(text[offset + start + t]));
        CHECK(b.targets[e * context + t] == static_cast<unsigned char>(text[offset + start + t + 1]));
      }
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
    // Same seed, same windows; another seed, another order.
    CHECK(split_of(path, split_kind, context, 9)->examples(5, 3).tokens == data->examples(5, 3).tokens);
    CHECK(split_of(path, split_kind, context, 10)->examples(0, 8).tokens != data->examples(0, 8).tokens);
  }
  // A gzip-compressed copy reads as the same text.
  write_gzip(dir.file("text.txt.gz"), {text.begin(), text.end()});
  CHECK(split_of(dir.file("text.txt.gz"), token_split::training, context, 9)->examples(0, 20).tokens ==
        split_of(path, token_split::training, context, 9)->examples(0, 20).tokens);
}

TEST_CASE("text and token shard errors name the file") {
  const temp_dir dir;
  const std::string text = dir.file("short.txt");
  write_bytes(text, std::vector<std::uint8_t>(100, 'a'));
  // 100 bytes: 90 training tokens, 10 held out.
  CHECK_NOTHROW(split_of(text, token_split::training, 89, 1));
  CHECK_THROWS_WITH_AS(split_of(text, token_split::training, 90, 1),
                       (text + ": context 90 longer than the data (90 tokens in the training split)").c_str(),
                       data_error);
  CHECK_THROWS_WITH_AS(split_of(text, token_split::held_out, 10, 1),
                       (text + ": context 10 longer than the data (10 tokens in the held-out split)").c_str(),
                       data_error);
  CHECK_THROWS_WITH_AS(split_of(dir.file("absent.txt"), token_split::training, 8, 1),
                       (dir.file("absent.txt") + ": No such file or directory").c_str(), data_error);
  const std::string empty_dir = dir.file("empty");
  fs::create_directories(empty_dir);
  CHECK_THROWS_WITH_AS(split_of(empty_dir, token_split::training, 8, 1),
                       (empty_dir + ": holds no text files or .bin token shards").c_str(), data_error);
  CHECK_THROWS_WITH_AS(split_of(dir.file("nothing_*.bin"), token_split::training, 8, 1),
                       (dir.file("nothing_*.bin") + ": matches no file").c_str(), data_error);

  const std::string shard = dir.file("shard.bin");
  std::vector<std::uint16_t> tokens(1000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 37 % 50257);

  SUBCASE("a valid shard loads") {
    write_bytes(shard, token_shard(20240520, 1, 1000, tokens));
    const auto data = split_of(shard, token_split::training, 32, 5, 50257);
    CHECK(data->size() == 900 - 32);
    const batch b = data->examples(77, 1);
    const std::uint64_t start = data->window_start(77);
    for (int t = 0; t < 32; ++t) {
      CHECK(b.tokens[t] == tokens[start + t]);
      CHECK(b.targets[t] == tokens[start + t + 1]);
    }
    CHECK_THROWS_WITH_AS(split_of(shard, token_split::training, 32, 5, 256),
                         (shard + ": token 259 at position 7 is outside the vocabulary of 256").c_str(),
                         data_error);
  }
  SUBCASE("bad magic") {
    write_bytes(shard, token_shard(20240521, 1, 1000, tokens));
    CHECK_THROWS_WITH_AS(split_of(shard, token_split::training, 32, 5, 50257),
                         (shard + ": wrong token shard magic 20240521 (expected 20240520)").c_str(),
                         data_error);
  }
  SUBCASE("unsupported version") {
    write_bytes(shard, token_shard(20240520, 2, 1000, tokens));
    CHECK_THROWS_WITH_AS(split_of(shard, token_split::training, 32, 5, 50257),
                         (shard + ": unsupported token shard version 2 (expected 1, uint16 tokens)").c_str(),
                         data_error);
  }
  SUBCASE("truncated tokens and header") {
    write_bytes(shard, token_shard(20240520, 1, 1001, tokens));
    CHECK_THROWS_WITH_AS(split_of(shard, token_split::training, 32, 5, 50257),
                         (shard + ": truncated: header promises 1001 tokens, file holds 1000").c_str(),
                         data_error);
    write_bytes(shard, std::vector<std::uint8_t>(100, 0));
    CHECK_THROWS_WITH_AS(split_of(shard, token_split::training, 32, 5, 50257),
                         (shard + ": truncated token shard header (100 of 1024 bytes)").c_str(),
                         data_error);
  }
  SUBCASE("text and shards do not mix") {
    write_bytes(shard, token_shard(20240520, 1, 1000, tokens));
    CHECK_THROWS_WITH_AS(load_token_data(shard, text, 0, 8, 1),
                         (text + ": holds text but the training data hold token shards").c_str(), data_error);
  }
}

TEST_CASE("a glob of token shards trains, separate shards evaluate, the vocabulary comes from the data") {
  const temp_dir dir;
  // Shard f holds tokens 20000 f + i: a target is always its token + 1 unless a window crossed
  // from one file into the next.
  const std::vector<std::size_t> lengths = {300, 40, 500};
  for (std::size_t f = 0; f < lengths.size(); ++f) {
    std::vector<std::uint16_t> tokens(lengths[f]);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(20000 * f + i);
    write_bytes(dir.file("train_" + std::to_string(f) + ".bin"),
                token_shard(20240520, 1, static_cast<std::uint32_t>(tokens.size()), tokens));
  }
  std::vector<std::uint16_t> held_out(200);
  for (std::size_t i = 0; i < held_out.size(); ++i) held_out[i] = static_cast<std::uint16_t>(60000 + i);
  write_bytes(dir.file("val_0.bin"), token_shard(20240520, 1, 200, held_out));

  const int context = 64;
  const token_data data = load_token_data(dir.file("train_*.bin"), dir.file("val_*.bin"), 0, context, 3);
  CHECK(data.train->vocab_size() == 60000 + 199 + 1);
  CHECK(data.eval->vocab_size() == data.train->vocab_size());
  // Every token of every training file is trained on; the 40-token file holds no window.
  CHECK(data.train->token_count() == 840);
  CHECK(data.train->size() == (300 - context) + (500 - context));
  CHECK(data.eval->size() == 200 - context);
  CHECK(data.train->describe().find("in 3 files") != std::string::npos);
  const batch b = data.train->examples(0, data.train->size());
  std::set<std::int32_t> files;
  for (std::size_t k = 0; k < b.tokens.size(); ++k) {
    CHECK(b.targets[k] == b.tokens[k] + 1);
    files.insert(b.tokens[k] / 20000);
  }
  CHECK(files == std::set<std::int32_t>{0, 2});
  for (std::int32_t t : data.eval->examples(0, 16).tokens) CHECK(t >= 60000);

  CHECK_THROWS_WITH_AS(load_token_data(dir.file("train_*.bin"), dir.file("val_*.bin"), 50257, context, 3),
                       (dir.file("val_0.bin") + ": token 60000 at position 0 is outside the vocabulary of 50257")
                           .c_str(),
                       data_error);
  // Without held-out files the last tenth of all training tokens is held out (84 of 840: the
  // last 84 of the third file).
  const token_data split = load_token_data(dir.file("train_*.bin"), "", 0, 16, 3);
  CHECK(split.eval->token_count() == 84);
  CHECK(split.eval->token(0) == 40000 + 500 - 84);
  CHECK(split.train->token(340) == 40000);
}

TEST_CASE("a directory of text files is a corpus: binary files and symlinks are skipped") {
  const temp_dir dir;
  fs::create_directories(dir.path / "sub");
  const std::string a(100, 'a'), b(200, 'b');
  write_bytes(dir.file("a.txt"), {a.begin(), a.end()});
  write_bytes((dir.path / "sub" / "b.txt").string(), {b.begin(), b.end()});
  write_bytes(dir.file("index.dat"), {1, 0, 0, 0, 'x'});
  fs::create_symlink(dir.path / "a.txt", dir.path / "c.txt");
  const auto data = split_of(dir.path.string(), token_split::whole, 8, 1);
  CHECK(data->token_count() == 300);
  CHECK(data->size() == (100 - 8) + (200 - 8));
  // The default corpus's own directory, as --data takes it.
  const auto fortunes = open_token_corpus(default_corpus_directory);
  CHECK(fortunes->pieces().size() > 10);
  CHECK(fortunes->is_text());
  for (const token_piece& piece : fortunes->pieces()) CHECK(piece.name.find(".dat") == std::string::npos);
}

TEST_CASE("the default corpus is the fortunes text without separators") {
  const std::string corpus = read_fortunes();
  CHECK(corpus.size() > 1000000);
  CHECK(corpus.find("\n%\n") == std::string::npos);
  CHECK(corpus.find("the") != std::string::npos);
  const auto train = load_default_corpus(64, true, 1);
  const auto held_out = load_default_corpus(64, false, 1);
  CHECK(train->size() + held_out->size() + 2 * 64 == corpus.size());
  CHECK(train->vocab_size() == 256);
  const batch b = train->examples(0, 4);
  CHECK(b.tokens.size() == 4 * 64);
  CHECK(std::all_of(b.tokens.begin(), b.tokens.end(), [](std::int32_t t) { return t >= 0 && t < 256; }));
  CHECK_THROWS_WITH_AS(read_fortunes("/nonexistent"),
                       "/nonexistent: No such file or directory (install Debian's fortunes package)", data_error);
}
