#!/usr/bin/env bash
# On the GPU machine, after stage.sh: the browser delivery bench on a synthetic model (KIND:
# llama-1b-q4k, 837 MB, the default; bitnet-2b4t, 1.18 GB) in 64 MB shards (SHARD to change
# it). PROFILE_TMPFS=1 puts Chromium's profile (where OPFS lives) on /dev/shm.
. scripts/device-browser/env.sh
KIND=${KIND:-llama-1b-q4k}
M=target/devroot/$KIND.gguf
[ -f $M ] || "$TRITIUM_BIN" synth $KIND $M
[ -n "${PROFILE_TMPFS:-}" ] && export TMPDIR=/dev/shm
BENCH_GGUF=$M BENCH_SHARD_SIZE=${SHARD:-64MB} DELIVERY_TIMEOUT_S=${TMO:-520} \
  node tests/browser/run-delivery.mjs --bench 2>&1 | grep -v '^ *"' | tail -40
