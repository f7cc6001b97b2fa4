#!/usr/bin/env bash
# Serve the demos (www/chat, www/tldr) from a fresh checkout, on loopback:
#   1. build the npm package into pkg/ if it is missing (`npm run build`),
#   2. build the tritium binary (debug, as the tests use; --release for a release build),
#   3. fetch the default model (SmolLM2-135M-Instruct Q4_1 GGUF, scripts/fetch-models.sh) and
#      convert it to RDRR once, into target/demo/,
#   4. serve it with `tritium serve-model` and www/ + pkg/ with scripts/demo-server.mjs, which
#      also serves /config.json naming the model URL (the demos' default; `?model=URL` on a
#      demo page overrides it).
# Ctrl+C stops both servers.
#
#   scripts/demo.sh [--release] [--rebuild-package]
#   npm run demo
#
# Environment: DEMO_PORT (default 8080), MODEL_PORT (default 8765), DEMO_HOST (default
# 127.0.0.1: WebGPU and OPFS need a secure context, and loopback is one), DEMO_MODEL (a GGUF file
# or an RDRR folder to serve instead of the default), TRITIUM_BIN (a tritium binary to use
# instead of building one), DEMO_PKG (the built package folder, default pkg/).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
rebuild_package=0
for arg in "$@"; do
  case "$arg" in
    --release) profile=release ;;
    --rebuild-package) rebuild_package=1 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done

demo_port="${DEMO_PORT:-8080}"
model_port="${MODEL_PORT:-8765}"
host="${DEMO_HOST:-127.0.0.1}"

command -v node >/dev/null || { echo "error: Node.js 20 or later is required (scripts/setup.sh)" >&2; exit 1; }
[ -d node_modules ] || npm ci --no-audit --no-fund

# 1. The package.
pkg="${DEMO_PKG:-pkg}"
if [ "$rebuild_package" = 1 ] || [ ! -f "$pkg/index.js" ]; then
  [ "$pkg" = pkg ] || { echo "error: $pkg/index.js is missing" >&2; exit 1; }
  echo "== building the npm package into pkg/ (npm run build)"
  npm run build
fi

# 2. The binary.
target_dir="${CARGO_TARGET_DIR:-target}"
if [ -n "${TRITIUM_BIN:-}" ]; then
  bin="$TRITIUM_BIN"
else
  echo "== building tritium ($profile)"
  if [ "$profile" = release ]; then
    cargo build -j2 --release --bin tritium
  else
    cargo build -j2 --bin tritium
  fi
  bin="$target_dir/$profile/tritium"
fi

# 3. The model, converted to RDRR once.
if [ -n "${DEMO_MODEL:-}" ]; then
  model="$DEMO_MODEL"
else
  gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -s "$gguf" ] || scripts/fetch-models.sh
  model="$target_dir/demo/SmolLM2-135M-Instruct-Q4_1"
  if [ ! -f "$model/manifest.json" ]; then
    echo "== converting $gguf to RDRR in $model (once)"
    rm -rf "$model.tmp"
    mkdir -p "$(dirname "$model")"
    "$bin" convert "$gguf" "$model.tmp"
    mv "$model.tmp" "$model"
  fi
fi

# 4. The servers.
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$bin" serve-model "$model" --port "$model_port" --host "$host" &
pids+=($!)
shown_host="$host"
[[ "$host" == *:* ]] && shown_host="[$host]"
model_url="http://$shown_host:$model_port/"
for _ in $(seq 1 100); do
  curl -fsS -o /dev/null "${model_url}manifest.json" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "error: tritium serve-model exited (is port $model_port free? set MODEL_PORT)" >&2; exit 1; }
  sleep 0.2
done

node scripts/demo-server.mjs --port "$demo_port" --host "$host" --pkg "$pkg" --model-url "$model_url" \
  --model-name "$(basename "$model")" &
pids+=($!)
sleep 0.5
kill -0 "${pids[1]}" 2>/dev/null || { echo "error: the demo server exited (is port $demo_port free? set DEMO_PORT)" >&2; exit 1; }
echo
echo "Open http://$shown_host:$demo_port/ in a browser with WebGPU (Ctrl+C stops both servers)."
wait -n "${pids[@]}"
