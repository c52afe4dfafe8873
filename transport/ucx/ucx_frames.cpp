// Frames as the lanes post them: every send and receive names a real peer and a tag that fits
// a UCX frame tag, and every completed receive is checked against the size expected.
#include "transport/ucx/ucx_worker.hpp"

namespace accord::detail {

using namespace ucx;

link& ucx_worker::checked_peer(const lane& caller, int peer, std::uint64_t tag) {
  if (!broken.empty()) throw transport_error(who() + "unusable after an earlier error: " + broken);
  if (peer < 0 || peer >= world || peer == rank)
    throw std::invalid_argument(who() + "peer " + std::to_string(peer) + " is not another rank of 0.." +
                                std::to_string(world - 1));
  if (!ucx_wire::tag_fits(tag) || (caller.tag_bit != 0 && (tag & caller.tag_bit) != 0))
    throw std::invalid_argument(who() + describe_tag(tag) + " needs more than the " + (caller.tag_bit ? "46" : "47") +
                                " bits a UCX frame tag carries" + (caller.tag_bit ? " on a channel" : ""));
  return *peers[static_cast<std::size_t>(peer)];
}

template <class Post>
std::uint64_t ucx_worker::post(lane& caller, Post post_operation) {
  try {
    if (caller.interruption && caller.interruption->raised()) throw transport_error(caller.interruption->message(who()));
    operation op;
    post_operation(op);
    caller.in_flight.emplace(caller.next_request, op);
    return caller.next_request++;
  } catch (...) {
    abandon_in_flight(caller, "an earlier post failed");
    throw;
  }
}

std::uint64_t ucx_worker::post_send(lane& caller, int peer, std::uint64_t tag, std::span<const std::byte> data) {
  return post(caller, [&](operation& op) {
    link& l = checked_peer(caller, peer, tag);
    if (l.failure != UCS_OK)
      throw transport_error(who() + "cannot send " + describe_tag(tag) + " to " + describe_peer(peer) +
                            ": it failed (" + ucs_status_string(l.failure) + ")");
    op = {nullptr, false, false, peer, tag, data.size()};
    ucp_request_param_t param{};
    op.request = posted(ucp_tag_send_nbx(l.endpoint, data.data(), data.size(),
                                         ucx_wire::frame_tag(rank, tag | caller.tag_bit), &param),
                        "sending " + describe_tag(tag) + " to " + describe_peer(peer));
  });
}

// Posted even when the peer has failed: frames it sent before are still queued here.
std::uint64_t ucx_worker::post_receive(lane& caller, int peer, std::uint64_t tag, std::span<std::byte> data) {
  return post(caller, [&](operation& op) {
    checked_peer(caller, peer, tag);
    op = {nullptr, true, false, peer, tag, data.size()};
    ucp_request_param_t param{};
    // Always a request, so that ucp_tag_recv_request_test reports the frame's length.
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    op.request = posted(ucp_tag_recv_nbx(worker.get(), data.data(), data.size(),
                                         ucx_wire::frame_tag(peer, tag | caller.tag_bit),
                                         ucx_wire::full_mask, &param),
                        "receiving " + describe_tag(tag) + " from " + describe_peer(peer));
  });
}

std::string ucx_worker::finish(operation& op, ucs_status_t status, std::size_t received) {
  op.finished = true;
  const std::string peer = describe_peer(op.peer);
  if (status == UCS_ERR_MESSAGE_TRUNCATED)
    return who() + peer + " sent a frame larger than the " + std::to_string(op.bytes) + " bytes expected for " +
           describe_tag(op.tag) + (received > op.bytes ? " (" + std::to_string(received) + " bytes)" : "");
  if (status != UCS_OK)
    return who() + (op.is_receive ? "receiving " : "sending ") + describe_tag(op.tag) +
           (op.is_receive ? " from " : " to ") + peer + " failed: " + ucs_status_string(status);
  if (op.is_receive && received != op.bytes)
    return who() + peer + " sent " + std::to_string(received) + " bytes for " + describe_tag(op.tag) + ", expected " +
           std::to_string(op.bytes);
  if (op.is_receive) {
    bytes_received += op.bytes;
  } else {
    bytes_sent += op.bytes;
    ++messages_sent;
  }
  return {};
}

std::string ucx_worker::unexpected_frame_from(int peer) {
  ucp_tag_recv_info_t info{};
  if (!ucp_tag_probe_nb(worker.get(), ucx_wire::frame_tag(peer, 0), ucx_wire::sender_mask, 0, &info)) return {};
  return "; it sent " + describe_tag(ucx_wire::frame_transport_tag(info.sender_tag)) + " (" +
         std::to_string(info.length) + " bytes) instead";
}

}  // namespace accord::detail
