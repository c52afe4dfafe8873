#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU (H100/H200: sm_90): builds the GPU parts in
# their own build directory, runs the CPU/GPU parity tests (kernels, NCCL, the CUDA GPT, every
# algorithm on resident CUDA workers with the tensor copies counted), then the benchmark, and
# prints the figures: the kernels' bandwidth against peak and against the measured copy
# bandwidth, GPT tokens/s host-staged, resident, and resident with an NCCL all-reduce of the
# gradients' size running alongside (the overlap slowdown), and with two GPUs or more ACCO's
# against DDP's time per step (rounds on the device: update_rule::apply_on_device), bf16
# compute's tokens/s against fp32 and a short bf16-compute training run, app-driven workers
# on the GPU (device spans through <accord/worker.hpp>), and accord.torch with CUDA modules
# (when the Python's torch has CUDA). Budget: under 5 minutes (the build
# dominates; one architecture).
# Needs the Debian packages of scripts/setup.sh and CUDA 13 + NCCL under /usr/local/cuda.
#   BUILD_DIR   build directory          (default: build-gpu-check)
#   CUDA_ARCH   CMAKE_CUDA_ARCHITECTURES (default: 90)
#   ELEMENTS    floats per kernel call   (default: 2^26, 256 MiB per buffer)
#   PYTHON      a Python whose torch has CUDA, for accord.torch's CUDA test (default: /usr/bin/python3)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-gpu-check}"
start=$SECONDS

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
configure_log=$(cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DACCORD_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" ${PYTHON:+-DPython3_EXECUTABLE="$PYTHON"})
grep -q "CUDA/NCCL parts ON" <<<"$configure_log" \
  || { echo "gpu-check: CMake found no nvcc; nothing to check" >&2; exit 1; }
cmake --build "$BUILD_DIR" --target test_gpu test_cuda_gpt test_device_rounds test_worker_device accord-bench-gpu \
  accord-train accord-launch \
  --parallel "$(nproc)"
echo "gpu-check: built in $((SECONDS - start)) s"

# Run the test binaries directly: on this machine a skipped GPU test is a failure.
# test_gpu: kernels, NCCL and the device collectives; test_cuda_gpt: the CUDA GPT against the
# CPU GPT; test_device_rounds: every rule's device form on NCCL against its host form;
# test_worker_device: app-driven workers whose parameters and gradients are on the GPU.
for test in test_gpu test_cuda_gpt test_device_rounds test_worker_device; do
  log="$BUILD_DIR/$test.log"
  timeout 120 "$BUILD_DIR/tests/$test" 2>&1 | tee "$log"
  if grep -q ACCORD_SKIPPED "$log"; then
    echo "gpu-check: $test was skipped: no usable CUDA device (driver?)" >&2
    exit 1
  fi
done

timeout 90 "$BUILD_DIR/apps/accord-bench-gpu" --device cuda --elements "${ELEMENTS:-67108864}" \
  --iterations 20 --gpt-steps 20
# End to end: ACCO with the CUDA GPT resident in every compute actor (in one process, one
# GPU), then, with two GPUs or more, one process per GPU over NCCL, ACCO against DDP.
timeout 90 "$BUILD_DIR/apps/accord-train" --device cuda --workers 2 --steps 30 --log-interval 10
# bf16 compute (bf16 GEMMs on a bf16 copy of the parameters, fp32 gradients): a few steps end to
# end; accord-bench-gpu above printed its resident tokens/s against fp32.
timeout 60 "$BUILD_DIR/apps/accord-train" --device cuda --compute-precision bf16 --workers 2 --steps 10 --log-interval 5
# Rounds on the device end to end (resident_memory, the rules' device forms, NCCL device
# collectives): one process per GPU over NCCL; with one GPU a world of one.
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
for algo in acco dlion-mavo; do
  timeout 60 "$BUILD_DIR/apps/accord-launch" -n 1 -- "$BUILD_DIR/apps/accord-train" --device cuda --transport nccl \
    --algo "$algo" --steps 30 --eval-interval 0 --log-interval 10
done
if [ "$gpus" -ge 2 ]; then
  for algo in acco ddp; do
    done_line=$(timeout 60 "$BUILD_DIR/apps/accord-launch" -n 2 -- "$BUILD_DIR/apps/accord-train" --device cuda \
      --transport nccl --algo "$algo" --steps 30 --eval-interval 0 --log-interval 10 | tee /dev/stderr | grep -o 'done: .*')
    # "[rank 0] done: 30 steps in 4.2s | ..."
    awk -v algo="$algo" '{ printf "gpu-check: %s over NCCL, 2 GPUs: %.1f ms per step\n", algo, 1000 * $5 / $2 }' \
      <<<"${done_line//s |/ |}"
  done
else
  echo "gpu-check: one GPU: ACCO against DDP over NCCL needs two"
fi
# The CUDA plugin: the runs above loaded it for --device cuda; a --device cpu run must not, and
# without the plugin --device cuda stops with one line.
if LD_DEBUG=files timeout 120 "$BUILD_DIR/apps/accord-train" --device cpu --steps 2 --log-interval 0 2>&1 \
    | grep -E "file=.*(libcudart|libcublas|libnccl|libaccord_cuda)"; then
  echo "gpu-check: a --device cpu run loaded a CUDA library" >&2
  exit 1
fi
# accord.torch with CUDA modules (fp32, bf16, fp16; flat buffers and accord's sums on the GPU,
# through the plugin): tests/test_python.py cuda_module, with a Python whose torch
# has CUDA (PYTHON; Debian's python3-torch has none, so without one the check says so and goes on).
if grep -q "accord Python module: for" <<<"$configure_log"; then
  cmake --build "$BUILD_DIR" --target accord_python --parallel "$(nproc)"
  python="$(grep -o 'accord Python module: for [^ ]*' <<<"$configure_log" | cut -d' ' -f5)"
  if PYTHONPATH="$BUILD_DIR/python" "$python" -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
    PYTHONPATH="$BUILD_DIR/python" timeout 300 "$python" "$ROOT/tests/test_python.py" cuda_module
  else
    echo "gpu-check: accord.torch's CUDA test not run: $python's torch has no CUDA (PYTHON=/path/to/python with a CUDA torch)"
  fi
else
  echo "gpu-check: accord.torch's CUDA test not run: CMake built no Python module (python3-dev, pybind11-dev)"
fi
missing=$(ACCORD_CUDA_PLUGIN=/nonexistent/libaccord_cuda.so "$BUILD_DIR/apps/accord-train" --device cuda \
  --steps 1 2>&1 || true)
grep -q "cannot load the CUDA plugin" <<<"$missing" \
  || { echo "gpu-check: a missing plugin gave '$missing'" >&2; exit 1; }
echo "gpu-check: done in $((SECONDS - start)) s"
