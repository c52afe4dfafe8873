#pragma once
// What travels on a UCX connection, shared by the transport and by tests that inject frames.
//
// Connection hello: right after a client endpoint connects, each side sends one fixed-size
// hello on the UCX stream of that endpoint (stream receives are per endpoint, so the accepting
// side learns which rank sits behind which endpoint). Client first, then the server's answer.
//
// Data frames: one UCX tag message per transport message, payload = the caller's bytes. The
// 64-bit UCX tag names the sender and the transport tag, so a receive matches only frames of
// that (peer, tag); the receive length is checked against the expected size on arrival.
//   bits 63..48  sender rank
//   bit  47      collective flag (bit 63 of the transport tag)
//   bits 46..0   the rest of the transport tag (must fit: larger tags are refused)
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace accord::ucx_wire {

inline constexpr int max_world = 1 << 16;
inline constexpr std::uint64_t collective_bit = 1ull << 63;
inline constexpr std::uint64_t tag_payload_mask = (1ull << 47) - 1;
inline constexpr std::uint64_t sender_mask = 0xffffull << 48;
inline constexpr std::uint64_t full_mask = ~0ull;

inline bool tag_fits(std::uint64_t tag) { return (tag & ~collective_bit) <= tag_payload_mask; }

inline std::uint64_t frame_tag(int sender, std::uint64_t tag) {
  return (static_cast<std::uint64_t>(sender) << 48) | ((tag & collective_bit) ? 1ull << 47 : 0) |
         (tag & tag_payload_mask);
}
inline int frame_sender(std::uint64_t wire_tag) { return static_cast<int>(wire_tag >> 48); }
inline std::uint64_t frame_transport_tag(std::uint64_t wire_tag) {
  return ((wire_tag & (1ull << 47)) ? collective_bit : 0) | (wire_tag & tag_payload_mask);
}

inline constexpr std::uint64_t hello_magic = 0x31434355'44524f43ull;  // "CORDUCC1" little-endian
inline constexpr std::uint32_t protocol_version = 1;

struct hello {
  std::uint32_t version = protocol_version;
  std::int32_t rank = 0;
  std::int32_t world = 0;
  std::uint64_t job_id = 0;
  std::uint64_t epoch = 0;
  bool operator==(const hello&) const = default;
};

// Fixed little-endian layout: magic u64, version u32, rank i32, world i32, pad u32, job u64, epoch u64.
inline constexpr std::size_t hello_bytes = 40;
using hello_frame = std::array<std::byte, hello_bytes>;

namespace detail {
inline void put(hello_frame& f, std::size_t at, std::uint64_t v, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) f[at + i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint64_t get(const hello_frame& f, std::size_t at, std::size_t n) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(f[at + i]) << (8 * i);
  return v;
}
}  // namespace detail

inline hello_frame encode(const hello& h) {
  hello_frame f{};
  detail::put(f, 0, hello_magic, 8);
  detail::put(f, 8, h.version, 4);
  detail::put(f, 12, static_cast<std::uint32_t>(h.rank), 4);
  detail::put(f, 16, static_cast<std::uint32_t>(h.world), 4);
  detail::put(f, 24, h.job_id, 8);
  detail::put(f, 32, h.epoch, 8);
  return f;
}

// Empty when the bytes are not a hello at all (wrong magic); field checks are the caller's.
inline std::optional<hello> decode(const hello_frame& f) {
  if (detail::get(f, 0, 8) != hello_magic) return std::nullopt;
  hello h;
  h.version = static_cast<std::uint32_t>(detail::get(f, 8, 4));
  h.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(detail::get(f, 12, 4)));
  h.world = static_cast<std::int32_t>(static_cast<std::uint32_t>(detail::get(f, 16, 4)));
  h.job_id = detail::get(f, 24, 8);
  h.epoch = detail::get(f, 32, 8);
  return h;
}

// Why a received hello cannot be from a peer of `mine` (empty when it can): it must speak our
// protocol for our job, epoch and world. Which rank it may claim is the listener's to check.
inline std::string hello_problem(const hello_frame& frame, const hello& mine) {
  const auto h = decode(frame);
  if (!h) return "sent a frame that is not an accord hello";
  if (h->version != protocol_version)
    return "speaks protocol " + std::to_string(h->version) + ", expected " + std::to_string(protocol_version);
  if (h->job_id != mine.job_id || h->epoch != mine.epoch)
    return "belongs to job " + std::to_string(h->job_id) + " epoch " + std::to_string(h->epoch) + ", expected job " +
           std::to_string(mine.job_id) + " epoch " + std::to_string(mine.epoch);
  if (h->world != mine.world) return "has world " + std::to_string(h->world) + ", expected " + std::to_string(mine.world);
  return {};
}

}  // namespace accord::ucx_wire
