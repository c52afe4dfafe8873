#pragma once
#include <exception>
#include <utility>

namespace accord {

// Runs `stop(unwinding)` when the scope ends, by an exception too. Actor handles held outside
// an actor system's scope keep their actors running, and the system's destructor waits for
// every running actor: an exception that skipped their shutdown used to hang the process there.
template <class Stop>
class scope_exit {
public:
  explicit scope_exit(Stop stop) : stop_(std::move(stop)) {}
  scope_exit(const scope_exit&) = delete;
  scope_exit& operator=(const scope_exit&) = delete;
  ~scope_exit() {
    try {
      stop_(std::uncaught_exceptions() > exceptions_);
    } catch (...) {  // cleaning up after a failure must not replace it (or terminate the process)
    }
  }

private:
  Stop stop_;
  int exceptions_ = std::uncaught_exceptions();
};

}  // namespace accord
