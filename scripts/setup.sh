#!/usr/bin/env bash
# Install what building and testing tritium needs on a fresh Debian machine (run as root, or
# with the tools already present). Safe to re-run: each step checks before it installs.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
# python3 -m venv (the client libraries tests/serve_clients.rs drives tritium serve with).
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
command -v cc >/dev/null || need_apt+=(build-essential)
command -v sha256sum >/dev/null || need_apt+=(coreutils)
command -v c++ >/dev/null || need_apt+=(g++)
# lavapipe: Vulkan on the CPU, so every WGSL kernel runs in the tests on any machine.
[ -f /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || need_apt+=(mesa-vulkan-drivers)
ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || need_apt+=(libvulkan1)
# Chromium (Debian's build) runs the kernel suite on WebGPU (SwiftShader) in tests/browser.
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null; then
  echo "error: a Rust toolchain (cargo) is required: https://rustup.rs" >&2
  exit 1
fi
if command -v rustup >/dev/null; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup target list --installed 2>/dev/null | grep -q '^wasm32-unknown-unknown$' \
    || rustup target add wasm32-unknown-unknown
fi

# wasm-bindgen-cli must be exactly the wasm-bindgen crate's version in Cargo.lock (no --locked:
# its lock file wants crate versions the registry mirror may lack).
wasm_bindgen=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{ print $2 }')" != "$wasm_bindgen" ]; then
  cargo install -j2 wasm-bindgen-cli --version "=$wasm_bindgen"
fi

# playwright-core drives the browser tests (never `playwright install`: /usr/bin/chromium is used).
if ! command -v npm >/dev/null; then
  echo "error: Node.js 20 or later with npm is required: https://nodejs.org" >&2
  exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ] \
  || [ package.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund
fi

# The official OpenAI and Ollama Python clients, for tests/serve_clients.rs: a venv under the
# repository (git-ignored), reinstalled only when tests/clients/requirements.txt changes.
if [ ! -x .venv-clients/bin/python ]; then
  python3 -m venv .venv-clients
fi
if [ ! -f .venv-clients/.installed ] || [ tests/clients/requirements.txt -nt .venv-clients/.installed ]; then
  .venv-clients/bin/pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt
  touch .venv-clients/.installed
fi
# NVIDIA's run-time CUDA compiler (a PyPI wheel; it needs no GPU), so that the suite compiles
# every CUDA kernel of native-gds for sm_80 and sm_90 (scripts/test.sh points
# TRITIUM_CUDA_LIBS at it).
if [ ! -f .venv-clients/.nvrtc ]; then
  .venv-clients/bin/pip install --quiet --disable-pip-version-check nvidia-cuda-nvrtc-cu12==12.9.86
  touch .venv-clients/.nvrtc
fi

scripts/fetch-models.sh
