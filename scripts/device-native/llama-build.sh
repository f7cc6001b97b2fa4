#!/usr/bin/env bash
# On the GPU machine (carry target/llama-src.tar.xz): starts building llama.cpp's llama-bench
# with CUDA in the background (about 300 s on 16 cores) and returns at once; $L/rc holds the
# build's exit status when it ends. A second call while a build exists does nothing, so a
# wrapper can start it early and cuda-full.sh use it later.
set -uo pipefail
cd "$(dirname "$0")/../.."
L=/tmp/llama
[ -e $L/started ] && exit 0
mkdir -p $L/src && touch $L/started
tar xJf target/llama-src.tar.xz -C $L/src
SRC=$(dirname "$(find $L/src -maxdepth 4 -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -1)")
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
setsid bash -c "cmake -S '$SRC' -B $L/build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=$arch -DGGML_CUDA_NCCL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  > $L/cmake.log 2>&1 && cmake --build $L/build -j16 --target llama-bench > $L/build.log 2>&1; echo \$? > $L/rc" &
