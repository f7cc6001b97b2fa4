#!/usr/bin/env bash
# On the GPU machine, one call (carry target/devgpu and target/llama-src.tar.xz): builds
# llama.cpp's llama-bench with CUDA in the background while cuda.sh runs its selftest and
# same-token steps (not timed), then, with the build done, the timed steps: cuda.sh's benches
# and bench-llama-cpp.sh for both tritium backends; between them (untimed), the per-kernel
# profile of `bench generate --profile`.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/device-native/env.sh
O=${OUT:-/tmp}
L=/tmp/llama
mkdir -p $L/src
tar xJf target/llama-src.tar.xz -C $L/src
SRC=$(dirname "$(find $L/src -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
setsid bash -c "cmake -S '$SRC' -B $L/build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  > $L/cmake.log 2>&1 && cmake --build $L/build -j16 --target llama-bench > $L/build.log 2>&1; echo \$? > $L/rc" &
T0=$(date +%s)
STEPS="${PRE_STEPS:-1 2}" scripts/device-native/cuda.sh 2>&1 | tee "$O/cuda-steps12.txt" | tail -30
echo "steps 1 2 took $(( $(date +%s) - T0 )) s"
for m in l b; do
  tritium bench generate /tmp/$m.gguf --backend cuda --prompt 512 --decode 64 --profile > "$O/profile-$m.txt" 2>&1
  echo "== $m"; grep -A14 "prompt token of the prefill" "$O/profile-$m.txt" | cut -c1-100
  grep -A22 "per decoded token" "$O/profile-$m.txt" | cut -c1-100
done
for _ in $(seq 1 ${BUILD_WAIT:-400}); do [ -f $L/rc ] && break; sleep 1; done
echo "llama.cpp build: rc $(cat $L/rc 2>/dev/null || echo none) after $(( $(date +%s) - T0 )) s"
tail -3 $L/build.log | cut -c1-300
STEPS=3 scripts/device-native/cuda.sh 2>&1 | tee "$O/cuda-step3.txt" | tail -20
if [ -x $L/build/bin/llama-bench ]; then
  cp $L/build/bin/llama-bench "$O/" 2>/dev/null
  for be in cuda gpu; do
    scripts/bench-llama-cpp.sh --llama-bench $L/build/bin/llama-bench --tritium "$(command -v tritium)" \
      --backend $be --rounds ${ROUNDS:-2} --work /tmp/vs-$be 2>&1 | tail -12 | tee "$O/vs-llama-$be.txt"
    mkdir -p "$O/vs-$be"; cp /tmp/vs-$be/*.json "$O/vs-$be/" 2>/dev/null
  done
fi
echo "total $(( $(date +%s) - T0 )) s"
