#pragma once
// An all-reduce whose values travel in a lossy precision (16-bit floats or a block code,
// transport/wire_precision.hpp) with error feedback, for sums of values that each rank computes
// afresh every time, such as local-sgd's pseudo-gradients: transport::reduce_scatter_feedback,
// then each owner's summed shard travels as transport::all_gather_delta from zero, so every rank
// ends with the same bits. One residual per rank carries what both collectives missed:
// - outside this rank's own shard, what its records to the other owners missed (the
//   reduce-scatter's error feedback; bf16 and fp16 values are rounded with feedback before
//   they go);
// - in its own shard, what the records of the sum it owns missed: its next reduce-scatter adds
//   that to its own shard, so the next sum carries it to every rank.
// So what the sums deliver over the calls is what was summed, less what the residuals still hold.
// fp32 sends the values as they are and leaves the residual at zero.
#include <span>

#include "transport/transport.hpp"

namespace accord {

// `residual` is as long as `values` and this rank's own (zeros at first, kept from call to
// call; std::invalid_argument otherwise). Every rank calls it with the same lengths and precision.
void all_reduce_with_feedback(transport& link, std::span<float> values, std::span<float> residual,
                              wire_precision precision);

}  // namespace accord
