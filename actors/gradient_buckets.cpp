#include "actors/gradient_buckets.hpp"

#include <algorithm>
#include <cmath>

namespace accord {

std::size_t bucket_elements(double cap_mb) {
  if (!(cap_mb > 0)) return 0;
  return std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(cap_mb * 1024 * 1024 / sizeof(float))));
}

std::size_t first_bucket_elements(std::size_t elements_per_bucket) {
  return std::min(elements_per_bucket, bucket_elements(1.0));
}

bucket_feed::bucket_feed(std::size_t elements_per_bucket, std::size_t total, send_function send)
    : elements_per_bucket_(std::max<std::size_t>(1, elements_per_bucket)),
      first_bucket_(first_bucket_elements(elements_per_bucket_)),
      total_(total),
      send_(std::move(send)) {}

void bucket_feed::arm(std::uint64_t round, tensor buffer) {
  round_ = round;
  buffer_ = std::move(buffer);
  unsent_end_ = total_;
}

void bucket_feed::disarm() {
  round_.reset();
  buffer_.reset();
}

void bucket_feed::final_from(std::size_t begin) {
  if (!round_) return;
  while (unsent_end_ > 0) {
    const std::size_t size = unsent_end_ == total_ ? first_bucket_ : elements_per_bucket_;
    const std::size_t start = unsent_end_ > size ? unsent_end_ - size : 0;
    if (start < begin) return;  // not finished yet
    send_(*round_, {start, unsent_end_}, buffer_);
    unsent_end_ = start;
  }
}

}  // namespace accord
