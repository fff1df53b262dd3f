#!/usr/bin/env bash
# Control-plane fan-out: N simulated gateways against one controller with a
# 100,000-proxy Redis pool, 1 % of it changing every second (issue #21 item 3).
#
#   ./bench/fanout/run.sh [--no-build]
#
# For each session count in FANOUT_SESSIONS: starts a private redis-server and a
# controller (release build, Redis store, plaintext control plane on loopback, the
# defaults of docs/control-plane.md except targetSlotsPerWorker = ceil(proxies / N) so
# the pool is split evenly, as a fleet sized for its pool would be), then the harness
# (`fanout`, bench/fanout/src): it fills the pool through the pool's provider and
# health ports, registers the sessions, waits until they hold the pool, changes 1 %
# of it per second (70 % refreshed with a new expiry, 15 % removed, 15 % new), warms
# up and measures. Prints one summary line per run and a table at the end; the JSON
# of each run is kept in $FANOUT_DIR.
#
# Environment (all optional):
#   FANOUT_SESSIONS   session counts, one run each (default "50 200 500")
#   FANOUT_PROXIES    pool size (default 100000)
#   FANOUT_RATE       share of the pool changed per second (default 0.01)
#   FANOUT_SECONDS    measured window per run (default 60)
#   FANOUT_WARMUP     churn before the window (default 15)
#   FANOUT_DIR        state, logs and results (default .cache/bench-fanout)
#   FANOUT_PORT_BASE  first of 4 consecutive loopback ports (default 19400)
#   FANOUT_CP_EXTRA   extra lines for the controller's controlPlane section (indented
#                     2 spaces), e.g. "  reportInterval: 1s"
#   FANOUT_PERF=1     also `perf record -g` the controller for half the window
#                     ($FANOUT_DIR/perf-N.data; report with perf report -i …)
#   FANOUT_CONTROLLER the controller binary to measure (default $CARGO_TARGET_DIR/release/
#                     proxy-pool-controller): a before/after run of a change
#   FANOUT_MARKER     a file to create while measuring and delete after (a shared
#                     machine's "benchmark running" flag); waits while another owns it
#   CARGO_TARGET_DIR  where the binaries are built (default target)
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

# shellcheck source=bench/lib/args.sh
source "bench/lib/args.sh"
bench_args fanout "$@"

SESSIONS=${FANOUT_SESSIONS:-50 200 500}
PROXIES=${FANOUT_PROXIES:-100000}
RATE=${FANOUT_RATE:-0.01}
WINDOW=${FANOUT_SECONDS:-60}
WARMUP=${FANOUT_WARMUP:-15}
DIR=${FANOUT_DIR:-$ROOT/.cache/bench-fanout}
PORT=${FANOUT_PORT_BASE:-19400}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
REDIS_SERVER=${PROXY_POOL_REDIS_SERVER:-$(command -v redis-server || echo /usr/bin/redis-server)}
MARKER=${FANOUT_MARKER:-}
mkdir -p "$DIR"

if [ "$BUILD" = 1 ]; then
    nice -n 5 cargo build --release -p proxy-pool-controller -p proxy-pool-bench-fanout
fi
CONTROLLER=${FANOUT_CONTROLLER:-$TARGET/release/proxy-pool-controller}
FANOUT=$TARGET/release/fanout
for b in "$CONTROLLER" "$FANOUT" "$REDIS_SERVER"; do
    [ -x "$b" ] || { echo "fanout: missing $b" >&2; exit 1; }
done

REDIS_PORT=$PORT CP_PORT=$((PORT + 1)) ADMIN_PORT=$((PORT + 2)) DIST_PORT=$((PORT + 3))
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && wait "$p" 2>/dev/null || true
    done
    PIDS=()
    if [ -n "$MARKER" ] && [ -f "$MARKER" ] && grep -q "fanout $$" "$MARKER" 2>/dev/null; then
        rm -f "$MARKER"
    fi
}
trap cleanup EXIT

wait_http() { # url, seconds
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "fanout: $1 did not answer within $2 s" >&2
    return 1
}

config() { # sessions
    local slots=$(((PROXIES + $1 - 1) / $1))
    local ups=""
    local u
    for u in a b c d; do
        ups+="  - name: fanout-$u
    protocol: http
    ttl: 30m
    safetyMargin: 5s
    quarantine: 0s
    maxConcurrencyPerProxy: 1
    maxSize: 1000000
    fetchInterval: 1h
    # One static entry (never marked healthy, so never assigned): the harness writes
    # this upstream's proxies through the pool's ports.
    source: {static: {proxies: ['127.0.0.1:9']}}
"
    done
    cat <<EOF
store:
  backend: redis
  redis: {address: 'redis://127.0.0.1:$REDIS_PORT/'}
distribution:
  listen: 127.0.0.1:$DIST_PORT
  auth: {mode: none}
admin: {listen: 127.0.0.1:$ADMIN_PORT}
controlPlane:
  enabled: true
  listen: 127.0.0.1:$CP_PORT
  loopbackPlaintext: true
  # The pool split evenly: ceil($PROXIES / $1) one-slot proxies per gateway.
  targetSlotsPerWorker: $slots
${FANOUT_CP_EXTRA:-}
upstreams:
$ups
routings:
  - {name: all, priority: 0, upstreams: [fanout-a, fanout-b, fanout-c, fanout-d]}
egress: {allowCidrs: [127.0.0.0/8]}
EOF
}

take_marker() {
    [ -n "$MARKER" ] || return 0
    while [ -f "$MARKER" ] && ! grep -q "fanout $$" "$MARKER" 2>/dev/null; do
        echo "fanout: $MARKER exists ($(cat "$MARKER" 2>/dev/null)); waiting" >&2
        sleep 5
    done
    echo "fanout $$ (bench/fanout/run.sh) since $(date -u +%H:%M:%S)" >"$MARKER"
}

RESULTS=()
for N in $SESSIONS; do
    run=$DIR/run-$N
    rm -rf "$run" && mkdir -p "$run"
    config "$N" >"$run/controller.yaml"
    "$CONTROLLER" validate-config "$run/controller.yaml" >/dev/null
    take_marker
    "$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no \
        --dir "$run" >"$run/redis.log" 2>&1 &
    REDIS_PID=$!
    PIDS+=("$REDIS_PID")
    for ((i = 0; i < 50; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break
        sleep 0.1
    done
    "$CONTROLLER" run --config "$run/controller.yaml" >"$run/controller.log" 2>&1 &
    CTL_PID=$!
    PIDS+=("$CTL_PID")
    wait_http "http://127.0.0.1:$ADMIN_PORT/readyz" 30
    PERF_PID=
    if [ "${FANOUT_PERF:-0}" = 1 ]; then
        (
            until grep -q "measuring window started" "$run/fanout.log" 2>/dev/null; do sleep 0.5; done
            exec perf record -F 499 -g -p "$CTL_PID" -o "$DIR/perf-$N.data" -- sleep $((WINDOW / 2))
        ) >"$run/perf.log" 2>&1 &
        PERF_PID=$!
    fi
    "$FANOUT" --endpoint "http://127.0.0.1:$CP_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/" \
        --proxies "$PROXIES" --sessions "$N" --change-rate "$RATE" \
        --warmup-secs "$WARMUP" --duration-secs "$WINDOW" \
        --controller-pid "$CTL_PID" --redis-pid "$REDIS_PID" --clk-tck "$(getconf CLK_TCK)" \
        --json "$DIR/fanout-$N.json" --verbose 2>&1 | tee "$run/fanout.log" | grep -v '^{'
    [ -n "$PERF_PID" ] && wait "$PERF_PID" 2>/dev/null || true
    cleanup
    RESULTS+=("$DIR/fanout-$N.json")
done

python3 - "${RESULTS[@]}" <<'EOF'
import json, sys
def f(v, fmt="{:.0f}"):
    return "—" if v is None else fmt.format(v)
print()
print("| sessions | change→ACK p50 / p99 (ms) | batch→every gateway's ACK p50 / p99 (ms) | controller CPU (cores) | controller RSS max (MiB) | Redis CPU (cores) | delta B/session/s | full B/session/s | deltas/session/s | unacked changes | session failures |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    r = json.load(open(path))
    c, b, p = r["change_to_ack_ms"], r["batch_to_all_acks_ms"], r["per_session_per_s"]
    print(f"| {r['sessions']} | {f(c['p50'])} / {f(c['p99'])} | {f(b['p50'])} / {f(b['p99'])} "
          f"| {f(r['controller_cores'], '{:.2f}')} | {f(r['controller_rss_max_mib'])} "
          f"| {f(r['redis_cores'], '{:.2f}')} | {f(p['delta_bytes'])} | {f(p['full_bytes'])} "
          f"| {f(p['delta_msgs'], '{:.2f}')} | {r['changes_unacked']} of {r['changes']} | {r['session_failures']} |")
EOF
