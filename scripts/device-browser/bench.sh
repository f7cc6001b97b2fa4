#!/usr/bin/env bash
# On the GPU machine, after stage.sh: the browser delivery bench on the synthetic Llama-1B
# (837 MB) in 64 MB shards (SHARD to change it).
. scripts/device-browser/env.sh
M=target/devroot/l1b.gguf
[ -f $M ] || "$TRITIUM_BIN" synth llama-1b-q4k $M
BENCH_GGUF=$M BENCH_SHARD_SIZE=${SHARD:-64MB} DELIVERY_TIMEOUT_S=${TMO:-520} \
  node tests/browser/run-delivery.mjs --bench 2>&1 | grep -v '^ *"' | tail -40
