#pragma once
// The arithmetic of asynchronous gossip's copies, apart from its threads and links (so that it
// is tested on its own): whom a worker averages with, one pairwise average, A2CiD2's continuous
// momentum (Nabli, Belilovsky, Oyallon, NeurIPS 2023, arXiv 2306.08289), what a clean leaver
// and a joiner do to the copies, and a sketch that estimates their spread from afar.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace accord {

// One way to pick the neighbour of an averaging event: the worker `offset` positions further
// among the n active ones (mod n), with this probability.
struct neighbour_offset {
  std::size_t offset = 1;
  double probability = 0;
};

// How a worker picks its neighbour among `n` active workers on `graph` (ring: ±1; exponential:
// ±2^k hops, 2^k < n, each k alike; complete: any other alike); equal offsets merged, none
// below 2 workers.
std::vector<neighbour_offset> neighbour_offsets(const std::string& graph, std::size_t n);

// The neighbour of worker `w` for one event among the active workers `present` (by rank),
// drawn by `offsets`; `w` itself when it has none (alone, or not among them).
std::size_t pick_neighbour(const std::vector<neighbour_offset>& offsets, const std::vector<std::size_t>& present,
                           std::size_t w, std::mt19937_64& draw);

// A2CiD2's constants (the paper's Prop. 3.6) for `n` workers that pick neighbours by `offsets`,
// each starting `rate` averaging events per unit of time (the unit in which η is a rate). The
// graph's Laplacian Λ weighs edge (i, j) by its events' rate, rate · (p_ij + p_ji).
struct a2cid2_constants {
  double chi1 = 0;           // 1 / the smallest positive eigenvalue of Λ
  double chi2 = 0;           // the largest ½ (e_i − e_j)ᵀ Λ⁺ (e_i − e_j) over the edges
  double eta = 0;            // θ and θ̃ mix at this rate between events: 1 / (2 √(χ1 χ2)); 0: no mixing
  double alpha_tilde = 0.5;  // θ̃'s step towards the neighbour's θ at an event: ½ √(χ1 / χ2)
};
// Nothing to accelerate (η = 0) below 2 workers or at rate 0.
a2cid2_constants a2cid2_for(const std::vector<neighbour_offset>& offsets, std::size_t n, double rate);

// Between events θ and θ̃ mix for `elapsed` units of time: d/dt (θ, θ̃) = η (θ̃ − θ, θ − θ̃), in
// closed form (the exponential of the 2x2 matrix: θ + θ̃ stays, θ − θ̃ shrinks by e^(−2η·elapsed)).
void a2cid2_mix(std::span<float> theta, std::span<float> tilde, double eta, double elapsed);

// One side of an A2CiD2 averaging event, all a process holding only its own θ̃ needs: θ̃ moves
// α̃ times the gap between the two θ before the event, θ̃ += α̃ (θ_other − θ_own).
void a2cid2_pull(std::span<float> tilde, std::span<const float> own, std::span<const float> other, double alpha_tilde);

// One averaging event of copies `a` and `b`: both become their mean (α = ½). With A2CiD2 (the
// θ̃ given), each θ̃ is first pulled towards the other's θ (a2cid2_pull on both sides).
void average_pair(std::span<float> a, std::span<float> b);
void average_pair(std::span<float> a, std::span<float> b, std::span<float> a_tilde, std::span<float> b_tilde,
                  double alpha_tilde);

// The element-wise mean of equally long copies, summed in double.
std::vector<double> mean_in_double(const std::vector<std::span<const float>>& copies);

// One process's copy in asynchronous gossip between processes (topologies/gossip/processes.cpp),
// where each side of an averaging event holds only its own θ (and A2CiD2's θ̃): the neighbour
// answers an offer, the initiator takes the answer, together the arithmetic of one process's
// pair (average_pair) on the job's clock. Not thread-safe: its owner locks.
class process_copy {
public:
  process_copy() = default;
  process_copy(std::span<const float> initial, bool momentum, const a2cid2_constants& constants);
  std::vector<float>& theta() { return theta_; }
  const std::vector<float>& theta() const { return theta_; }
  std::span<float> tilde() { return tilde_; }  // empty without A2CiD2
  std::span<const float> tilde() const { return tilde_; }
  // After its owner changed θ (a gradient's step).
  void changed() { ++version_; }
  std::uint64_t version() const { return version_; }
  // The job's time θ and θ̃ are mixed up to (A2CiD2; 0 without it).
  double time() const { return mixed_until_; }
  // θ and θ̃ mixed up to the job's time `now` (never back; a change).
  void catch_up(double now);
  // The neighbour's side: mixed up to the initiator's `time`, θ̃ pulled towards its θ `theirs`,
  // θ their mean. Returns θ before, the answer (the event's time is time() then).
  std::vector<float> answer(std::span<const float> theirs, double time);
  // The initiator's side, once answered: it offered `sent` at version `at`, `theirs` came back
  // at the neighbour's `time`. Mixed up to that time too (both sides take the event at one time
  // unless another exchange overlapped), θ̃ pulled, θ the mean — or, if θ changed since `sent`,
  // plus half the difference (the sum of the copies is kept, no update lost).
  void take_answer(std::span<const float> sent, std::uint64_t at, std::span<const float> theirs, double time);
  // A complete average (an elastic job's kept step, every copy mixed up to one time first): θ and
  // θ̃ both become `mean`, the mean of the θ, as at the start. On one clock the mean of the θ̃ is
  // the mean of the θ (Σ(θ̃ − θ) stays 0), so this is also the θ̃'s mean: each θ̃'s difference
  // from θ, its pulls towards neighbours that the average has now met, is dropped, where keeping
  // it would push the agreeing copies apart again.
  void settle(std::span<const float> mean);

private:
  bool momentum_ = false;
  a2cid2_constants constants_;
  std::vector<float> theta_, tilde_;
  double mixed_until_ = 0;
  std::uint64_t version_ = 0;  // changes of θ
};

// A fixed random projection of a copy to `size` floats, the same on every process for one
// `seed`: a count sketch (each coordinate goes, with a random sign, into one of `size` buckets,
// both hashed from the seed and its index; summed in double). Being linear, the spread of the
// sketches estimates the spread of the copies: E‖S(x − y)‖² = ‖x − y‖² over the seeds, with a
// relative standard deviation of at most √(2 / size) for one difference. One pass, no state.
std::vector<float> sketch_of(std::span<const float> copy, std::size_t size, std::uint64_t seed);

// A clean leaver: each of `remaining` takes (leaver − m) / remaining.size(), m the mean of the
// remaining and the leaver, so the remaining copies' mean becomes m (the leaver's copy stays in it).
void spread_leaver(const std::vector<std::span<float>>& remaining, std::span<const float> leaver);

}  // namespace accord
