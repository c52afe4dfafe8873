#pragma once
// A GPU worker's tensors in its device's memory, shared by its three actors. The actors pass
// host `tensor`s as before; on a resident worker each tensor is only a handle: the buffer that
// counts is its device buffer here, made at its first use. The accumulator's double buffer
// (zeroed and, for ACCO's estimate, copied on the device), the gradient sum the model adds
// into, the communicator's round buffer and the parameters the compute actor swaps in are all
// such buffers, so a tensor moving between the actors moves no values: the next round's
// parameters are swapped in by handle between two micro-batches.
//
// Host values of a handle are stale except where download() refreshed them: the communicator
// mirrors each round's new parameters to the host once (replica hash, divergence check,
// reports and checkpoints read them), never a micro-batch's.
//
// Ordering: buffer operations (zero, copy) are queued on the worker's buffer stream without a
// host wait; each buffer they touch, read or written, remembers the event after them. A stream
// that uses the buffer next waits for that event on the device (order_on); the model, which
// takes memory with no pending work of other streams, gets it after a host wait on the event
// (ready_for_model). That covers ACCO's copy too: the sum it reads is written by the next
// micro-batch only once the copy has run. In practice only the first micro-batch after a
// zeroing or a copy waits, for one short kernel.
//
// Threads: each actor uses a tensor only while it holds it, so buffers need no lock; the table
// of buffers has one. On a host memory_location (job_config::resident_on_host) the same path
// runs with host buffers and the CPU kernels, which is how it is tested without a GPU.
#include "algorithms/round_state.hpp"
#include "gpu/device.hpp"
#include "gpu/kernels.hpp"

#include <accord/device_span.hpp>

#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace accord {

class resident_memory {
public:
  explicit resident_memory(const memory_location& where);
  resident_memory(const resident_memory&) = delete;
  resident_memory& operator=(const resident_memory&) = delete;

  const memory_location& where() const { return where_; }

  // The device buffer of `t`; at its first use it is made and, with `upload`, filled with t's
  // host values (once: the job's initial parameters).
  device_span<float> buffer_of(const tensor& t, bool upload = false);
  // Queued on the buffer stream.
  void zero(const tensor& t);
  void copy(const tensor& from, const tensor& to);
  // `t`'s buffer as the model may take it: every write to it has finished.
  device_span<float> ready_for_model(const tensor& t);
  // Work queued on `stream` from now on runs after the buffer operations queued on t's buffer.
  void order_on(const tensor& t, kernels& stream);
  // t's host values := its buffer's (a counted device-to-host copy); the buffer has no pending
  // writes of other streams (the caller finished them).
  void download(const tensor& t);

private:
  struct slot {
    std::weak_ptr<std::vector<float>> owner;
    device_array<float> values;
    std::shared_ptr<const device_event> last_use;  // after the last buffer operation; null: none pending
  };
  slot& slot_of(const tensor& t, bool upload);
  void activate() const;

  memory_location where_;
  device_kind kind_;
  std::unique_ptr<kernels> stream_;  // the buffer stream
  std::mutex mutex_;                 // guards slots_ (the table, not the buffers)
  std::vector<std::unique_ptr<slot>> slots_;
};

}  // namespace accord
