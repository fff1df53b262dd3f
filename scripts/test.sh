#!/usr/bin/env bash
# Runs every Proxy Pool test: formatting, lints, unit tests, contract tests on both pool
# implementations against a real redis-server, and the end-to-end suites.
# Installs what a fresh Debian machine lacks (needs root or sudo for apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
# The wall time of the whole run, also when a step fails.
trap 'rc=$?; log "exit $rc after ${SECONDS} s"' EXIT

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || need_apt+=(redis-sentinel)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]} from Debian's packages"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# Tests start their own redis-server on a free loopback port; they find it here.
export PROXY_POOL_REDIS_SERVER="${PROXY_POOL_REDIS_SERVER:-$(command -v redis-server)}"

for extra in scripts/test.d/*.sh; do
  [ -e "$extra" ] || continue
  log "preparing: $extra"
  # shellcheck source=/dev/null
  source "$extra"
done

log "cargo fmt --check"
cargo fmt --all -- --check

log "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

# The fuzz targets are a separate workspace that nothing else builds: type-check them so
# they cannot rot. Their (untracked) lock file is seeded from the main one, so they use
# the same, already fetched, versions plus libfuzzer-sys's few crates.
log "cargo check of the fuzz targets (gateway/fuzz)"
cp Cargo.lock gateway/fuzz/Cargo.lock
cargo check --manifest-path gateway/fuzz/Cargo.toml --all-targets

log "cargo test --no-run (every test target)"
cargo test --workspace --no-run

# The cluster lane: the release build of the images, then the cluster test, in the
# background at a lower priority while the other tests run (most of their time is
# spent waiting on processes, and the lane's on pods); its log follows theirs.
skip=()
lane_pid=""
# It runs when test.d/cluster.sh prepared the cluster (root), as the test does.
if [ "${PROXY_POOL_CLUSTER_PREPARED:-}" = 1 ]; then
  lane_log="${CARGO_TARGET_DIR:-target}/cluster-lane.log"
  log "cluster lane (nice 10, in the background): scripts/images.sh, then cargo test -p proxy-pool-e2e --test cluster; log: $lane_log"
  (
    set -e
    start=$SECONDS
    nice -n 10 scripts/images.sh
    echo "cluster lane: images in $((SECONDS - start)) s"
    nice -n 10 cargo test -p proxy-pool-e2e --test cluster --no-fail-fast -- --nocapture
    echo "cluster lane: done in $((SECONDS - start)) s"
  ) >"$lane_log" 2>&1 &
  lane_pid=$!
  skip=(-- --skip proxy_pool_on_a_real_cluster)
fi

log "cargo test"
tests_rc=0
cargo test --workspace --no-fail-fast "${skip[@]}" || tests_rc=$?

lane_rc=0
if [ -n "$lane_pid" ]; then
  log "waiting for the cluster lane"
  wait "$lane_pid" || lane_rc=$?
  log "cluster lane (exit $lane_rc):"
  cat "$lane_log"
fi
[ "$tests_rc" -eq 0 ] || { echo "cargo test failed (exit $tests_rc)" >&2; exit "$tests_rc"; }
[ "$lane_rc" -eq 0 ] || { echo "the cluster lane failed (exit $lane_rc)" >&2; exit "$lane_rc"; }
