#pragma once
// A move-only `void()` callable for the simulation's events. std::function allocates for any
// capture over two pointers and copies on every hand-over; most events (heartbeats, agent ticks,
// steps) capture a few integers, so they live here inline and a run allocates little per event.
#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace accord::sim {

class task {
public:
  task() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, task>>>
  task(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert as they do to std::function
    using stored = std::decay_t<F>;
    if constexpr (sizeof(stored) <= inline_size && alignof(stored) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<stored>) {
      ::new (static_cast<void*>(storage_)) stored(std::forward<F>(f));
      ops_ = &inline_ops<stored>;
    } else {
      ::new (static_cast<void*>(storage_)) stored*(new stored(std::forward<F>(f)));
      ops_ = &heap_ops<stored>;
    }
  }
  task(task&& other) noexcept : ops_(std::exchange(other.ops_, nullptr)) { take(other); }
  task& operator=(task&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = std::exchange(other.ops_, nullptr);
      take(other);
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  ~task() { reset(); }

  void operator()() { ops_->call(storage_); }
  explicit operator bool() const { return ops_ != nullptr; }

private:
  static constexpr std::size_t inline_size = 48;
  struct operations {
    void (*call)(void*);
    void (*move)(void* to, void* from);  // and destroys `from`; null: the bytes are the callable
    void (*destroy)(void*);              // null: nothing to destroy
  };
  template <class F>
  static constexpr bool plain = std::is_trivially_copyable_v<F> && std::is_trivially_destructible_v<F>;
  template <class F>
  static constexpr operations inline_ops{
      [](void* s) { (*static_cast<F*>(s))(); },
      plain<F> ? nullptr : +[](void* to, void* from) {
        ::new (to) F(std::move(*static_cast<F*>(from)));
        static_cast<F*>(from)->~F();
      },
      plain<F> ? nullptr : +[](void* s) { static_cast<F*>(s)->~F(); }};
  template <class F>
  static constexpr operations heap_ops{
      [](void* s) { (**static_cast<F**>(s))(); },
      nullptr,  // the pointer's bytes move
      [](void* s) { delete *static_cast<F**>(s); }};
  void reset() {
    if (ops_ && ops_->destroy) ops_->destroy(storage_);
    ops_ = nullptr;
  }
  void take(task& other) {  // other's ops_ are this one's already
    if (!ops_) return;
    if (ops_->move)
      ops_->move(storage_, other.storage_);
    else
      std::memcpy(storage_, other.storage_, inline_size);
  }

  alignas(std::max_align_t) unsigned char storage_[inline_size];
  const operations* ops_ = nullptr;
};

}  // namespace accord::sim
