#pragma once
// The arithmetic of asynchronous gossip's copies, apart from its threads and links (so that it
// is tested on its own): whom a worker averages with, one pairwise average, A2CiD2's continuous
// momentum (Nabli, Belilovsky, Oyallon, NeurIPS 2023, arXiv 2306.08289) and what a clean leaver
// and a joiner do to the copies.
#include <cstddef>
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

// One averaging event of copies `a` and `b`: both become their mean (α = ½). With A2CiD2 (the
// θ̃ given), each θ̃ first moves α̃ times the gap to the other's θ: θ̃_a += α̃ (θ_b − θ_a).
void average_pair(std::span<float> a, std::span<float> b);
void average_pair(std::span<float> a, std::span<float> b, std::span<float> a_tilde, std::span<float> b_tilde,
                  double alpha_tilde);

// The element-wise mean of equally long copies, summed in double.
std::vector<double> mean_in_double(const std::vector<std::span<const float>>& copies);

// A clean leaver: each of `remaining` takes (leaver − m) / remaining.size(), m the mean of the
// remaining and the leaver, so the remaining copies' mean becomes m (the leaver's copy stays in it).
void spread_leaver(const std::vector<std::span<float>>& remaining, std::span<const float> leaver);

}  // namespace accord
