#include "topologies/gossip/arithmetic.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

namespace accord {

std::vector<neighbour_offset> neighbour_offsets(const std::string& graph, std::size_t n) {
  if (n < 2) return {};
  std::vector<double> by_offset(n, 0.0);
  if (graph == "complete") {
    for (std::size_t o = 1; o < n; ++o) by_offset[o] = 1.0 / static_cast<double>(n - 1);
  } else {
    std::size_t hops = 1;  // ring: 2^0 only
    if (graph == "exponential")
      while ((std::size_t{1} << hops) < n) ++hops;
    for (std::size_t k = 0; k < hops; ++k) {
      const std::size_t hop = std::size_t{1} << k;
      by_offset[hop % n] += 0.5 / static_cast<double>(hops);      // forward
      by_offset[n - hop % n] += 0.5 / static_cast<double>(hops);  // backward
    }
  }
  std::vector<neighbour_offset> offsets;
  for (std::size_t o = 1; o < n; ++o)
    if (by_offset[o] > 0) offsets.push_back({o, by_offset[o]});
  return offsets;
}

std::size_t pick_neighbour(const std::vector<neighbour_offset>& offsets, const std::vector<std::size_t>& present,
                           std::size_t w, std::mt19937_64& draw) {
  const auto at = static_cast<std::size_t>(std::find(present.begin(), present.end(), w) - present.begin());
  if (offsets.empty() || at == present.size()) return w;
  std::vector<double> weights;
  for (const neighbour_offset& choice : offsets) weights.push_back(choice.probability);
  const std::size_t pick = std::discrete_distribution<std::size_t>(weights.begin(), weights.end())(draw);
  return present[(at + offsets[pick].offset) % present.size()];
}

a2cid2_constants a2cid2_for(const std::vector<neighbour_offset>& offsets, std::size_t n, double rate) {
  if (n < 2 || rate <= 0) return {};
  // Λ is circulant (every worker picks by the same offsets): its eigenvalues are
  // μ_k = 2·rate·Σ_o p_o (1 − cos(2πko/n)), and ½ (e_0 − e_o)ᵀ Λ⁺ (e_0 − e_o) = (1/n) Σ_k (1 − cos(2πko/n)) / μ_k.
  const auto turn = [n](std::size_t k, std::size_t o) {
    return 1.0 - std::cos(2 * std::numbers::pi * static_cast<double>(k * o % n) / static_cast<double>(n));
  };
  std::vector<double> eigenvalues(n, 0.0);
  for (std::size_t k = 1; k < n; ++k)
    for (const neighbour_offset& choice : offsets) eigenvalues[k] += 2 * rate * choice.probability * turn(k, choice.offset);
  const double smallest = *std::min_element(eigenvalues.begin() + 1, eigenvalues.end());
  if (!(smallest > 1e-12)) throw std::logic_error("gossip: the neighbour graph is not connected");
  a2cid2_constants c;
  c.chi1 = 1 / smallest;
  for (const neighbour_offset& choice : offsets) {
    double half_resistance = 0;
    for (std::size_t k = 1; k < n; ++k) half_resistance += turn(k, choice.offset) / eigenvalues[k];
    c.chi2 = std::max(c.chi2, half_resistance / static_cast<double>(n));
  }
  c.eta = 0.5 / std::sqrt(c.chi1 * c.chi2);
  c.alpha_tilde = 0.5 * std::sqrt(c.chi1 / c.chi2);
  return c;
}

void a2cid2_mix(std::span<float> theta, std::span<float> tilde, double eta, double elapsed) {
  if (!(eta > 0 && elapsed > 0)) return;
  const double shrink = std::exp(-2 * eta * elapsed);
  const auto keep = static_cast<float>(0.5 * (1 + shrink)), give = static_cast<float>(0.5 * (1 - shrink));
  for (std::size_t i = 0; i < theta.size(); ++i) {
    const float t = theta[i];
    theta[i] = keep * t + give * tilde[i];
    tilde[i] = give * t + keep * tilde[i];
  }
}

void average_pair(std::span<float> a, std::span<float> b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = b[i] = 0.5f * (a[i] + b[i]);  // the same bits on both
}

void a2cid2_pull(std::span<float> tilde, std::span<const float> own, std::span<const float> other, double alpha_tilde) {
  const auto step = static_cast<float>(alpha_tilde);
  for (std::size_t i = 0; i < tilde.size(); ++i) tilde[i] += step * (other[i] - own[i]);
}

void average_pair(std::span<float> a, std::span<float> b, std::span<float> a_tilde, std::span<float> b_tilde,
                  double alpha_tilde) {
  a2cid2_pull(a_tilde, a, b, alpha_tilde);
  a2cid2_pull(b_tilde, b, a, alpha_tilde);
  average_pair(a, b);
}

process_copy::process_copy(std::span<const float> initial, bool momentum, const a2cid2_constants& constants)
    : momentum_(momentum), constants_(constants), theta_(initial.begin(), initial.end()) {
  if (momentum_) tilde_ = theta_;
}

void process_copy::catch_up(double now) {
  if (!momentum_ || !(constants_.eta > 0) || now <= mixed_until_) return;
  a2cid2_mix(theta_, tilde_, constants_.eta, now - mixed_until_);
  mixed_until_ = now;
  ++version_;
}

std::vector<float> process_copy::answer(std::span<const float> theirs, double time) {
  catch_up(time);
  std::vector<float> before = theta_;
  if (momentum_) a2cid2_pull(tilde_, before, theirs, constants_.alpha_tilde);
  for (std::size_t i = 0; i < theta_.size(); ++i) theta_[i] = 0.5f * (before[i] + theirs[i]);  // the initiator's bits
  ++version_;
  return before;
}

void process_copy::take_answer(std::span<const float> sent, std::uint64_t at, std::span<const float> theirs,
                               double time) {
  catch_up(time);
  if (momentum_) a2cid2_pull(tilde_, sent, theirs, constants_.alpha_tilde);
  if (version_ == at) {  // unchanged: the mean, the neighbour's bits
    for (std::size_t i = 0; i < theta_.size(); ++i) theta_[i] = 0.5f * (sent[i] + theirs[i]);
  } else {  // changed meanwhile: keep the change, add this event's
    for (std::size_t i = 0; i < theta_.size(); ++i) theta_[i] += 0.5f * (theirs[i] - sent[i]);
  }
  ++version_;
}

void process_copy::settle(std::span<const float> mean) {
  theta_.assign(mean.begin(), mean.end());
  if (momentum_) tilde_ = theta_;
  ++version_;
}

std::vector<double> mean_in_double(const std::vector<std::span<const float>>& copies) {
  std::vector<double> mean(copies.empty() ? 0 : copies.front().size(), 0.0);
  for (std::span<const float> copy : copies)
    for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += copy[i];
  for (double& m : mean) m /= static_cast<double>(copies.size());
  return mean;
}

std::vector<float> sketch_of(std::span<const float> copy, std::size_t size, std::uint64_t seed) {
  std::vector<double> buckets(size, 0.0);
  for (std::size_t i = 0; i < copy.size(); ++i) {
    std::uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;  // splitmix64's finaliser: a hash of (seed, i)
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const auto bucket = static_cast<std::size_t>(((z & 0xffffffffull) * size) >> 32);
    buckets[bucket] += (z >> 63) ? -static_cast<double>(copy[i]) : static_cast<double>(copy[i]);
  }
  return {buckets.begin(), buckets.end()};
}

void spread_leaver(const std::vector<std::span<float>>& remaining, std::span<const float> leaver) {
  if (remaining.empty()) return;
  std::vector<std::span<const float>> all(remaining.begin(), remaining.end());
  all.push_back(leaver);
  const std::vector<double> mean = mean_in_double(all);
  const float share = 1.0f / static_cast<float>(remaining.size());
  for (std::span<float> copy : remaining)
    for (std::size_t i = 0; i < mean.size(); ++i) copy[i] += (leaver[i] - static_cast<float>(mean[i])) * share;
}

}  // namespace accord
