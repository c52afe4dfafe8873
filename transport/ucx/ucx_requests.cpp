// Each lane's requests in flight and the one loop that waits for them: it progresses the
// worker, spins then sleeps when idle, and turns a failed peer, a timeout or an interrupt into
// one transport_error after cancelling what the lane still has in flight.
#include <poll.h>
#include <sched.h>

#include <algorithm>

#include "transport/ucx/ucx_worker.hpp"

namespace accord::detail {

using namespace ucx;

namespace {

// Cancelling a receive that already matched a rendezvous frame waits for the transfer to stop.
constexpr auto cancel_timeout = std::chrono::seconds(1);

}  // namespace

void ucx_worker::progress(steady::time_point until, steady::time_point spin_until, std::unique_lock<std::mutex>* held) {
  do {
    if (ucp_worker_progress(worker.get()) != 0) return;
    if (held) held->unlock();
    sched_yield();
    if (held) held->lock();
  } while (steady::now() < spin_until);
  // UCS_ERR_BUSY: events arrived meanwhile, progress again (also runs in the destructor, so no throw).
  if (ucp_worker_arm(worker.get()) != UCS_OK) return;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - steady::now()).count();
  pollfd waiting{event_fd, POLLIN, 0};
  // Two lanes may both sleep here; whichever progresses first takes the events, and the other
  // wakes within max_sleep_ms at worst.
  if (held) held->unlock();
  poll(&waiting, 1, static_cast<int>(std::clamp<long long>(left, 0, max_sleep_ms)));
  if (held) held->lock();
}

void ucx_worker::abandon_in_flight(lane& caller, const std::string& message) {
  for (auto& [handle, op] : caller.in_flight) {
    if (!op.request) continue;
    if (op.is_receive) {
      // Once cancelled, the receive no longer writes into the caller's buffer.
      ucp_request_cancel(worker.get(), op.request);
      const auto until = steady::now() + cancel_timeout;
      while (ucp_request_check_status(op.request) == UCS_INPROGRESS && steady::now() < until) progress(until);
      if (ucp_request_check_status(op.request) == UCS_INPROGRESS) broken = message;
    } else {
      // A send cannot be recalled: UCX may still read the caller's buffer, so stop here.
      broken = message;
    }
    ucp_request_free(op.request);
    op.request = nullptr;
  }
  caller.in_flight.clear();
}

void ucx_worker::abandon(lane& caller, const std::string& message) {
  abandon_in_flight(caller, message);
  throw transport_error(message);
}

ucx_worker::operation& ucx_worker::in_flight_operation(lane& caller, std::uint64_t handle) {
  const auto found = caller.in_flight.find(handle);
  if (found == caller.in_flight.end())
    throw std::logic_error(who() + "wait for request " + std::to_string(handle) + ", which is not in flight");
  return found->second;
}

bool ucx_worker::settled(lane& caller, std::uint64_t handle) {
  const operation& op = in_flight_operation(caller, handle);
  if (!op.request || (caller.interruption && caller.interruption->raised())) return true;
  while (ucp_worker_progress(worker.get()) != 0) {
  }
  return ucp_request_check_status(op.request) != UCS_INPROGRESS ||
         peers[static_cast<std::size_t>(op.peer)]->failure != UCS_OK;
}

void ucx_worker::wait(lane& caller, std::span<const std::uint64_t> handles, std::unique_lock<std::mutex>& held) {
  const auto deadline = steady::now() + options.operation_timeout;
  const auto spin_until = steady::now() + idle_spin;  // one spin per wait, however often it wakes
  std::string error;  // the first completed operation's problem, reported once all are done
  bool drained = false;
  for (;;) {
    bool pending = false;
    for (const std::uint64_t handle : handles) {
      operation& op = in_flight_operation(caller, handle);
      if (op.finished) continue;
      ucs_status_t status = UCS_OK;
      ucp_tag_recv_info_t info{};
      if (op.request) {
        status = op.is_receive ? ucp_tag_recv_request_test(op.request, &info) : ucp_request_check_status(op.request);
        if (status == UCS_INPROGRESS) {
          pending = true;
          continue;
        }
        ucp_request_free(op.request);
        op.request = nullptr;
      }
      const std::string problem = finish(op, status, info.length);
      if (error.empty()) error = problem;
    }
    if (!pending) break;
    if (caller.interruption && caller.interruption->raised()) abandon(caller, caller.interruption->message(who()));

    const operation* stuck = nullptr;
    for (const std::uint64_t handle : handles) {
      const operation& op = caller.in_flight.at(handle);
      if (op.request && peers[static_cast<std::size_t>(op.peer)]->failure != UCS_OK) stuck = &op;
    }
    if (stuck) {
      // Frames that arrived just before the failure was noticed still count.
      if (!drained) {
        drained = true;
        while (ucp_worker_progress(worker.get()) != 0) {
        }
        continue;
      }
      abandon(caller, !error.empty() ? error
                             : who() + describe_peer(stuck->peer) + " failed during " + describe_tag(stuck->tag) + ": " +
                                   ucs_status_string(peers[static_cast<std::size_t>(stuck->peer)]->failure));
    }
    if (steady::now() >= deadline) {
      const operation* late = nullptr;
      for (const std::uint64_t handle : handles)
        if (!late && caller.in_flight.at(handle).request) late = &caller.in_flight.at(handle);
      if (!error.empty()) abandon(caller, error);
      if (late->is_receive)
        abandon(caller, who() + "no " + describe_tag(late->tag) + " from " + describe_peer(late->peer) + " within " +
                seconds(options.operation_timeout) + unexpected_frame_from(late->peer));
      abandon(caller, who() + describe_peer(late->peer) + " did not take " + describe_tag(late->tag) + " (" +
              std::to_string(late->bytes) + " bytes) within " + seconds(options.operation_timeout));
    }
    progress(deadline, spin_until, &held);
  }
  for (const std::uint64_t handle : handles) caller.in_flight.erase(handle);
  if (!error.empty()) abandon(caller, error);
}

}  // namespace accord::detail
