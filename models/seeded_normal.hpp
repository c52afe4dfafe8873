#pragma once
// Normal samples from splitmix64 + Box-Muller: the same seed gives the same initialisation
// with any standard library (std::normal_distribution's algorithm is implementation-defined,
// and workers built differently must still agree on θ_0).
#include <cmath>
#include <cstdint>

namespace accord {

class seeded_normal {
public:
  explicit seeded_normal(std::uint64_t seed) : state_(seed) {}

  float operator()(float stddev) {
    if (has_spare_) {
      has_spare_ = false;
      return float(spare_ * stddev);
    }
    // u1 in (0, 1] keeps the logarithm finite.
    const double u1 = (double(next() >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = double(next() >> 11) * 0x1.0p-53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    spare_ = radius * std::sin(angle);
    has_spare_ = true;
    return float(radius * std::cos(angle) * stddev);
  }

private:
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace accord
