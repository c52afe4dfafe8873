// A CPU-only consumer of accord: trains a tiny GPT for a few steps with accord's CPU paths,
// then checks that no CUDA, cuBLAS or NCCL library was mapped into the process (the CUDA
// plugin must stay unloaded) and prints its peak resident memory. With `empty` it does
// nothing but the check: the footprint of merely linking accord.
#include <accord/version.hpp>

#include "gpu/device.hpp"
#include "gpu/model_factory.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

// Lines of /proc/self/maps naming a CUDA, cuBLAS or NCCL library.
std::vector<std::string> gpu_mappings() {
  std::vector<std::string> found;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    for (const char* name : {"libcuda", "libcublas", "libnccl", "libaccord_cuda"})
      if (line.find(name) != std::string::npos) found.push_back(line);
  return found;
}

std::string peak_resident() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmHWM:")) return line.substr(6);
  return "unknown";
}

void train_tiny_gpt() {
  const accord::gpt_config config{.vocab = 16, .context = 8, .layers = 1, .heads = 2, .width = 16};
  auto net = accord::make_gpt_on(accord::parse_device("cpu"), config);
  std::vector<float> parameters(net->parameter_count()), gradients(net->parameter_count());
  net->initialize(parameters, 1);
  accord::batch input;
  input.examples = 2;
  for (int i = 0; i < 2 * 8; ++i) {
    input.tokens.push_back(i % 16);
    input.targets.push_back((i + 1) % 16);
  }
  for (int step = 0; step < 3; ++step) {
    net->forward_backward(parameters, input, gradients);
    for (std::size_t i = 0; i < parameters.size(); ++i) parameters[i] -= 0.01f * gradients[i];
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool empty = argc > 1 && std::strcmp(argv[1], "empty") == 0;
  if (!empty) train_tiny_gpt();
  const std::vector<std::string> mapped = gpu_mappings();
  for (const auto& line : mapped) std::fprintf(stderr, "accord-package-probe: GPU library mapped: %s\n", line.c_str());
  std::printf("accord %s, %s consumer: peak resident%s, %zu GPU libraries mapped\n",
              std::string(accord::version()).c_str(), empty ? "empty" : "CPU training", peak_resident().c_str(),
              mapped.size());
  return mapped.empty() ? 0 : 1;
}
