#!/bin/sh
# Under scripts/gpu-check on a machine whose nvidia-smi sees a GPU (HIPPO_GPU_REQUIRED=1), a GPU
# test that sees no device fails instead of skipping (tests/cuda_devices.h). Here, where no GPU
# is seen: the CUDA kernel tests skip, and with HIPPO_GPU_REQUIRED=1 they fail, saying why.
# Usage: gpu_required_test.sh CUDA_KERNELS_TEST (skips, exit 77, where a GPU is seen).
test_binary=$1
if nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "a GPU is seen here: gpu-check runs the GPU tests"
  exit 77
fi
filter=--gtest_filter=CudaKernelsTest.MemoryIsZeroedCopiedAndFilled
out=$("$test_binary" "$filter" 2>&1) || { echo "without HIPPO_GPU_REQUIRED: $out"; exit 1; }
echo "$out" | grep -q "SKIPPED" || { echo "expected a skip: $out"; exit 1; }
if out=$(HIPPO_GPU_REQUIRED=1 "$test_binary" "$filter" 2>&1); then
  echo "HIPPO_GPU_REQUIRED=1 and no device seen, yet it passed: $out"
  exit 1
fi
echo "$out" | grep -q "HIPPO_GPU_REQUIRED=1 says this machine has a GPU" ||
  { echo "the failure does not say why: $out"; exit 1; }
echo "ok: skips without a GPU, fails with HIPPO_GPU_REQUIRED=1"
