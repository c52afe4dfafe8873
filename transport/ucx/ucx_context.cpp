// The UCX context and worker of one rank: options, device checks, the rendezvous threshold,
// and the teardown that must not crash UCX.
#include <net/if.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "transport/ucx/ucx_worker.hpp"

namespace accord {
namespace {

using namespace detail::ucx;

using config_ptr = std::unique_ptr<ucp_config_t, handle_deleter<ucp_config_release>>;

// A flush-close completes only once the peer's worker acknowledges it. Peers closing at about
// the same time answer within milliseconds; one that is busy or destroyed later on the same
// thread must not stall our teardown (it sees the disconnect either way).
constexpr auto close_timeout = std::chrono::milliseconds(50);

// UCX only warns about a network device it does not have, then never connects (the peers wait
// for the connect timeout): refuse such a UCX_NET_DEVICES at once, naming the device.
void check_net_devices(const std::string& devices) {
  if (devices.empty() || devices == "all") return;
  std::istringstream items(devices);
  for (std::string item; std::getline(items, item, ',');) {
    const std::string name = item.substr(0, item.find(':'));  // "mlx5_0:1" is port 1 of mlx5_0
    struct stat info {};
    if (name.empty() || if_nametoindex(name.c_str()) != 0 ||
        stat(("/sys/class/infiniband/" + name).c_str(), &info) == 0)
      continue;
    throw transport_error("ucx: UCX_NET_DEVICES=" + devices + ": this machine has no network device '" + name +
                          "' (ucx_info -d lists the devices)");
  }
}

// The UCX variables that decide which transports exist, as "UCX_TLS=..., " for messages.
std::string transport_variables() {
  std::string set;
  for (const char* name : {"UCX_TLS", "UCX_NET_DEVICES"})
    if (const char* value = std::getenv(name)) set += std::string(name) + "=" + value + ", ";
  return set;
}

bool rdma_devices_present() {
  std::error_code ignored;
  return std::filesystem::directory_iterator("/sys/class/infiniband", ignored) != std::filesystem::directory_iterator();
}

}  // namespace

std::optional<std::string> eager_rendezvous_threshold(const char* user_threshold, bool rdma_devices) {
  if (user_threshold || rdma_devices) return std::nullopt;
  return std::to_string(2 * ucx_ring_piece_bytes);
}

namespace detail {
namespace ucx {

void check(ucs_status_t status, const std::string& what) {
  if (status != UCS_OK) throw transport_error("ucx: " + what + " failed: " + ucs_status_string(status));
}

void* posted(ucs_status_ptr_t request, const std::string& what) {
  if (UCS_PTR_IS_ERR(request)) check(UCS_PTR_STATUS(request), what);
  return request;
}

ucs_status_t poll_request(void*& request) {
  if (!request) return UCS_OK;
  const ucs_status_t status = ucp_request_check_status(request);
  if (status != UCS_INPROGRESS) {
    ucp_request_free(request);
    request = nullptr;
  }
  return status;
}

std::string seconds(std::chrono::milliseconds duration) {
  std::ostringstream out;
  out.precision(3);
  out << std::chrono::duration<double>(duration).count() << " s";
  return out.str();
}

}  // namespace ucx

ucx_worker::ucx_worker(const std::string& address, ucx_options opts) : options(std::move(opts)) {
  const socket_address bind_address = resolve(address);

  ucp_config_t* raw_config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &raw_config), "ucp_config_read");
  config_ptr config(raw_config);
  if (!options.net_devices.empty())
    check(ucp_config_modify(config.get(), "NET_DEVICES", options.net_devices.c_str()),
          "setting UCX_NET_DEVICES=" + options.net_devices);
  if (const auto threshold = eager_rendezvous_threshold(std::getenv("UCX_RNDV_THRESH"), rdma_devices_present()))
    check(ucp_config_modify(config.get(), "RNDV_THRESH", threshold->c_str()), "setting UCX_RNDV_THRESH=" + *threshold);
  // Lets a restarted job bind its fixed port again while the old one is in TIME-WAIT.
  check(ucp_config_modify(config.get(), "CM_REUSEADDR", "y"), "setting UCX_CM_REUSEADDR=y");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  // Tag matching puts each frame straight into the receiver's buffer with a size check; the
  // stream carries the per-endpoint hello; wakeup lets idle waits sleep.
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP;
  ucp_context_h raw_context = nullptr;
  check_net_devices(!options.net_devices.empty() ? options.net_devices
                    : std::getenv("UCX_NET_DEVICES") ? std::getenv("UCX_NET_DEVICES")
                                                      : "");
  if (const ucs_status_t status = ucp_init(&params, config.get(), &raw_context); status != UCS_OK)
    throw transport_error("ucx: no usable UCX transport (" + transport_variables() + "ucp_init: " +
                          ucs_status_string(status) + "; ucx_info -d lists what this machine has)");
  context.reset(raw_context);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // One thread at a time (setup may run on another thread than the communicator).
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h raw_worker = nullptr;
  check(ucp_worker_create(context.get(), &worker_params, &raw_worker), "ucp_worker_create");
  worker.reset(raw_worker);
  check(ucp_worker_get_efd(worker.get(), &event_fd), "ucp_worker_get_efd");

  listen(address, bind_address);
}

ucx_worker::~ucx_worker() {
  refuse_dials();
  // Deliver pending endpoint errors first, then flush-close healthy endpoints so peers see an
  // orderly disconnect; failed ones are dropped.
  while (ucp_worker_progress(worker.get()) != 0) {
  }
  std::vector<void*> closing;
  for (auto& l : links)
    if (void* request = close(*l, l->failure == UCS_OK)) closing.push_back(request);
  const auto deadline = steady::now() + close_timeout;
  while (!closing.empty()) {
    std::erase_if(closing, [](void* request) { return poll_request(request) != UCS_INPROGRESS; });
    if (closing.empty() || steady::now() >= deadline) break;
    progress(deadline);
  }
  for (void* request : closing) ucp_request_free(request);
  listener.reset();  // then the worker, without progress in between (see `listener`)
  worker.reset();    // before the members its requests may still point into (`dials`, `accepts`)
}

void* ucx_worker::close(link& l, bool flush) {
  if (!l.endpoint) return nullptr;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = flush ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
  const ucs_status_ptr_t request = ucp_ep_close_nbx(l.endpoint, &param);
  l.endpoint = nullptr;
  return UCS_PTR_IS_ERR(request) ? nullptr : request;
}

bool ucx_worker::safe_to_destroy() const {
  const interrupt_flag* interruption = lanes[0].interruption;
  return links.empty() ||
         (connected && broken.empty() && !endpoint_interrupted && !(interruption && interruption->raised()));
}

void retire(std::unique_ptr<ucx_worker> worker) {
  if (!worker || worker->safe_to_destroy()) return;
  // A failed or unfinished setup, or a transport that gave up on operations: its teardown would
  // have to progress the worker, and UCX 1.13 may then deliver a message for an endpoint closed
  // during the failure and abort the process (ucp_worker_get_ep_by_id: "(*ep_p)->worker ==
  // worker"), or finish a send given up on from a buffer its owner has freed; without progress,
  // closing aborts on the pending requests. So the worker stays, never progressed again, with
  // the buffers its requests point into; its peers see the connections drop when this process
  // ends. One per failed epoch.
  static std::mutex guard;
  static auto* retired = new std::vector<ucx_worker*>();  // reachable: not a leak to sanitizers
  const std::lock_guard lock(guard);
  retired->push_back(worker.release());
}

}  // namespace detail
}  // namespace accord
