#!/usr/bin/env bash
# Gateway vs its peers (squid, glider) vs the floor (a minimal relay) vs a direct
# connection to the upstream, in one run, on loopback.
#
#   ./bench/gateway/run.sh [--no-build]
#
# Starts the vendor simulator (upstream HTTP proxies + echo target), the controller
# (memory pool), a checker and the gateway (release builds, as scripts/dev-up.sh does),
# and, all in front of the same simulator proxies:
#   squid   from Debian (installed with apt-get when missing; run unprivileged with a
#           generated config: cache_peer to the simulator proxies, round-robin,
#           never_direct, no cache, no access log);
#   glider  github.com/nadoo/glider (a rotating forward proxy), built from its Go module
#           into ${PROXY_POOL_CACHE_DIR:-.cache}/glider/<version>/ when missing: one
#           -forward http://user:pass@ip:port per simulator proxy, -strategy rr, health
#           checks off (-check disable: the default probes a public URL) and
#           -maxfailures 0 (no forwarder is ever disabled: with checks off nothing would
#           enable it again). glider closes every plain-HTTP client connection after its
#           response (Connection: close) and carries each such request through a new
#           CONNECT tunnel to the upstream: its (a) and (c) figures include a new client
#           connection per request;
#   relay   the floor, bench/relay (bench-relay): the least work that carries a CONNECT
#           tunnel the way the gateway must — accept, read the client's CONNECT head, dial
#           the next simulator proxy (round-robin), send it CONNECT with
#           Proxy-Authorization, read its 200, answer 200, relay both ways with plain
#           read/write loops, close; no routing, no auth, no metrics. One current-thread
#           Tokio runtime per core on SO_REUSEPORT listeners, like the gateway's data
#           plane, so gateway ÷ relay is the gateway's own work per tunnel. CONNECT only.
# Then measures:
#   (a) keep-alive HTTP req/s (closed loop), and CPU µs per request of the proxy process
#       (direct, gateway, squid, glider)
#   (b) CONNECT tunnels per second (new tunnel + one request each), CPU µs per tunnel
#       (direct, gateway, relay, squid, glider)
#   (c) p50/p99 at 50 % of each proxy's own max rate (open loop, keep-alive HTTP), minus
#       direct's at the same rate (gateway, squid, glider), and the gateway's at each
#       peer's rate too (the same load as the peer)
#   (d) RSS per idle CONNECT tunnel (gateway, squid)
# and prints a table: ratios against the direct baseline of the same run, gateway ÷
# relay, squid and glider, and the #21 targets (CPU per tunnel ≤ 1.2 × the relay's;
# added p99 ≤ 0.5 × the better peer's).
#
# Environment (all optional):
#   BENCH_SECONDS      length of each measured phase (default 10)
#   BENCH_CONNECTIONS  closed-loop client connections (default 32)
#   BENCH_PROXIES      simulator upstream proxies shared by all three (default 8)
#   BENCH_TUNNELS      idle tunnels for the memory figure (default 2000)
#   BENCH_PORT_BASE    first of 12 consecutive loopback ports (default 19300)
#   RELAY_BIN          the floor relay (default $CARGO_TARGET_DIR/release/bench-relay)
#   GLIDER_BIN         a glider binary to use instead of the cached build
#   GLIDER_VERSION     the glider module version built when missing (default v0.16.4)
#   BENCH_DIR          state and results (default .cache/bench-gateway)
#   BENCH_NICE         nice level of the measured processes and the load side (default -10
#                      as root, 0 otherwise): ahead of unrelated builds on the machine
#   BENCH_CPU_PROXY / BENCH_CPU_LOAD
#                      CPU lists (taskset) for the proxy under test / for the load
#                      generator and simulator; empty (default) = no pinning
#   GATEWAY_WORKER_THREADS
#                      the gateway's --worker-threads (default: unset = the gateway's
#                      default, the available parallelism)
#   GATEWAY_BIN        the gateway binary to measure (default $CARGO_TARGET_DIR/release/
#                      proxy-pool-gateway): A/B runs of an old and a new build
#   GATEWAY_BIN_B      A/B mode: measure GATEWAY_BIN (A) against this binary (B) on one
#                      stack, alternated (A B, B A, A B, …; each started afresh and warmed
#                      up), (a) and (b) only, no peers, relay or direct; prints every round, the
#                      medians of CPU µs per request / per tunnel and of the rates, and
#                      B ÷ A. E.g. GATEWAY_BIN=old/proxy-pool-gateway
#                      GATEWAY_BIN_B=new/proxy-pool-gateway BENCH_SECONDS=5 ./bench/gateway/run.sh --no-build
#   BENCH_AB_ROUNDS    A/B rounds (default 5; each round measures both binaries)
#   BENCH_SKIP_IDLE=1  skip (d), the idle-tunnel memory phase (A/B runs of CPU and latency)
#   BENCH_STAY_UP=1    start everything, write $BENCH_DIR/stack.txt and wait (profiling)
#   CARGO_TARGET_DIR   where the binaries are built (default target)
set -euo pipefail

cd "$(dirname "$0")/../.."
ROOT=$(pwd)

# shellcheck source=bench/lib/args.sh
source "bench/lib/args.sh"
bench_args bench "$@"

SECONDS_PER_PHASE=${BENCH_SECONDS:-10}
CONNS=${BENCH_CONNECTIONS:-32}
NPROX=${BENCH_PROXIES:-8}
TUNNELS=${BENCH_TUNNELS:-2000}
BASE=${BENCH_PORT_BASE:-19300}
DIR=${BENCH_DIR:-$ROOT/.cache/bench-gateway}
if [ "$(id -u)" = 0 ]; then NICE=${BENCH_NICE:--10}; else NICE=${BENCH_NICE:-0}; fi
CPU_PROXY=${BENCH_CPU_PROXY:-}
CPU_LOAD=${BENCH_CPU_LOAD:-}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
case "$TARGET" in /*) ;; *) TARGET=$ROOT/$TARGET ;; esac
BIN=$TARGET/release
GW_BIN=${GATEWAY_BIN:-$BIN/proxy-pool-gateway}
RELAY=${RELAY_BIN:-$BIN/bench-relay}

SIM_PORT=$BASE ECHO_PORT=$((BASE + 1)) ECHO_TLS_PORT=$((BASE + 2))
DIST_PORT=$((BASE + 3)) ADMIN_PORT=$((BASE + 4)) CP_PORT=$((BASE + 5))
GW_HTTP_PORT=$((BASE + 6)) GW_SOCKS_PORT=$((BASE + 7)) GW_ADMIN_PORT=$((BASE + 8))
SQUID_PORT=$((BASE + 9)) RELAY_PORT=$((BASE + 10)) GLIDER_PORT=$((BASE + 11))

for tool in curl jq sha256sum taskset; do
    command -v "$tool" >/dev/null || { echo "bench: $tool is required" >&2; exit 1; }
done
if ! command -v squid >/dev/null && [ ! -x /usr/sbin/squid ]; then
    [ "$(id -u)" = 0 ] || { echo "bench: squid missing (apt-get install -y squid as root)" >&2; exit 1; }
    echo "bench: installing squid (apt-get)"
    apt-get install -y squid >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y squid >/dev/null; }
fi
SQUID=$(command -v squid || echo /usr/sbin/squid)
# The package starts a system squid on :3128; it is not ours and not measured.

# glider: built once from its Go module (`go build` in the module's own directory, so its
# go.mod and go.sum pin every dependency; `go install …@version` rejects modules with
# replace directives, which glider has, and first reads the module's version list, which
# the module proxy may refuse). Not needed by the A/B mode.
GLIDER_VERSION=${GLIDER_VERSION:-v0.16.4}
GLIDER=${GLIDER_BIN:-${PROXY_POOL_CACHE_DIR:-$ROOT/.cache}/glider/$GLIDER_VERSION/glider}
if [ -z "${GATEWAY_BIN_B:-}" ] && [ ! -x "$GLIDER" ]; then
    [ -z "${GLIDER_BIN:-}" ] || { echo "bench: GLIDER_BIN $GLIDER_BIN is not executable" >&2; exit 1; }
    repo=$ROOT
    # shellcheck source=scripts/lib/go.sh
    . "$ROOT/scripts/lib/go.sh"
    go_tool_init bench "the Go toolchain is required to build glider"
    build_glider() { # scratch dir → scratch/glider
        local src
        src=$(go_mod_dir "github.com/nadoo/glider@$GLIDER_VERSION")
        [ -n "$src" ] || return 1
        (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -buildvcs=false \
            -ldflags "-s -w" -o "$1/glider" .)
    }
    go_build_once "glider $GLIDER_VERSION" "$GLIDER" build_glider
fi

if [ "$BUILD" = 1 ]; then
    echo "bench: building release binaries"
    cargo build --release -p proxy-pool-e2e -p proxy-pool-controller -p proxy-pool-checker \
        -p proxy-pool-gateway -p proxy-pool-bench-relay --bins
fi
for b in vendor-sim loadgen proxy-pool-controller proxy-pool-checker proxy-pool-gateway; do
    [ -x "$BIN/$b" ] || { echo "bench: $BIN/$b missing (run without --no-build)" >&2; exit 1; }
done
[ -x "$GW_BIN" ] || { echo "bench: GATEWAY_BIN $GW_BIN is not executable" >&2; exit 1; }
[ -n "${GATEWAY_BIN_B:-}" ] || [ -x "$RELAY" ] || {
    echo "bench: $RELAY missing (run without --no-build, or set RELAY_BIN; cargo build --release -p proxy-pool-bench-relay)" >&2
    exit 1
}

rm -rf "$DIR"
mkdir -p "$DIR/logs" "$DIR/results" "$DIR/squid"
chmod 755 "$DIR"

# Enough descriptors for the idle-tunnel phase (each tunnel: 2 in the proxy, 2 in the
# simulator, 1 in the echo server and 1 in the load generator).
# glider holds each tunnel's sockets for 5 s after the client has gone (its relay waits
# out a read deadline instead of passing the half-close on), so its CONNECT rate is
# bounded by the descriptor limit (~1,000 tunnels/s under 20,000); raise the hard limit
# where the container permits it.
[ "$(id -u)" = 0 ] && { ulimit -Hn 262144 2>/dev/null || true; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

VENDOR_KEY=bench-vendor-key
# The Distribution API is not measured; its key is a throw-away fixture.
API_KEY_SHA=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n' | sha256sum | cut -d' ' -f1)
GW_USER=bench
GW_PASS=bench-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
printf %s "$VENDOR_KEY" > "$DIR/vendor-api-key"
printf '[{"client":"bench-client","username":"%s","password":"%s"}]\n' "$GW_USER" "$GW_PASS" \
    > "$DIR/gateway-clients.json"
chmod 600 "$DIR/vendor-api-key" "$DIR/gateway-clients.json"

# The simulator sells exactly NPROX proxies (later fetches get 503 pool_exhausted), so
# its live list is the gateway's upstream set. inlineEcho: the simulator's proxies
# answer requests for the echo target themselves instead of over a second loopback
# connection, so the target's cost stays off the two cores (BENCH_INLINE_ECHO=false
# restores the extra hop).
cat > "$DIR/sim.yaml" <<YAML
maxLiveProxies: $NPROX
inlineEcho: ${BENCH_INLINE_ECHO:-true}
maxConnectionsPerProxy: 8192
maxEchoConnections: 16384
handshakeTimeoutMs: 10000
YAML

# shellcheck source=scripts/lib/stack.sh
. "$ROOT/scripts/lib/stack.sh"
cat > "$DIR/controller.yaml" <<YAML
# Generated by bench/gateway/run.sh.
store:
  backend: memory
distribution:
  listen: 127.0.0.1:$DIST_PORT
  auth: {mode: any, methods: [{type: apiKey}]}
$(stack_admin_and_control_plane "$ADMIN_PORT" "$CP_PORT")
  extractionReserve: 0
upstreams:
  - name: sim-http
    protocol: http
    ttl: 2h
    safetyMargin: 10s
    # 8 × 1000 slots stay under the controller's target capacity per gateway (10,000),
    # so every proxy is assigned to the gateway.
    maxConcurrencyPerProxy: 1000
    maxSize: $NPROX
    fetchInterval: 10s
    # Every run starts a fresh memory store: no proxy can have been handed out before,
    # so the new-generation quarantine (docs/pool.md) would only hold the set back.
    quarantine: 0s
    source:
      vendorApi:
        url: http://127.0.0.1:$SIM_PORT/v1/proxies?count=$NPROX&protocol=http
        format: json
        apiKeyFile: $DIR/vendor-api-key
        timeout: 5s
routings:
  - name: bench
    priority: 1
    upstreams: [sim-http]
    # CONNECT to the simulator's echo endpoints (default: 443 and 80).
    connectPorts: ['$ECHO_PORT', '$ECHO_TLS_PORT']
clients:
  - name: bench-client
    permissions: [distribution:extract]
    maxExtractCount: 1
    apiKeys: [{sha256: $API_KEY_SHA}]
shutdown:
  gracePeriod: 2s
# The simulator's proxies and echo endpoints are on 127.0.0.x: loopback is refused by
# default (egress policy, docs/security.md) and opted in here.
egress:
  allowCidrs: [127.0.0.0/8]
YAML

PROC_TAG=bench PROC_LOGS=$DIR/logs PROC_STOP_TIMEOUT=15
# shellcheck source=scripts/lib/processes.sh
. "$ROOT/scripts/lib/processes.sh"

with_cpus() { # cpus command... → CMD=(the command, pinned and niced)
    local cpus=$1
    shift
    CMD=("$@")
    [ -n "$cpus" ] && CMD=(taskset -c "$cpus" "${CMD[@]}")
    [ "$NICE" != 0 ] && CMD=(nice -n "$NICE" "${CMD[@]}")
    return 0
}

start() { # name cpus command...  (in the background; $! is the process itself)
    local name=$1 cpus=$2
    shift 2
    with_cpus "$cpus" "$@"
    proc_start "$name" "${CMD[@]}"
}

export RUST_LOG=${RUST_LOG:-warn}
# The checker's and gateway's egress policy: loopback opted in (an environment variable,
# so an older gateway build in an A/B run ignores it).
export PROXY_POOL_EGRESS_ALLOW_CIDRS=127.0.0.0/8
start vendor-sim "$CPU_LOAD" "$BIN/vendor-sim" --config "$DIR/sim.yaml" \
    --listen "127.0.0.1:$SIM_PORT" --echo-http "127.0.0.1:$ECHO_PORT" \
    --echo-https "127.0.0.1:$ECHO_TLS_PORT" --api-key "$VENDOR_KEY" --ttl-min 7200 --ttl-max 7200
wait_for "vendor simulator" curl -fsS "http://127.0.0.1:$SIM_PORT/healthz"
SIM_PID=${PIDS[0]}

start controller "$CPU_LOAD" "$BIN/proxy-pool-controller" run --config "$DIR/controller.yaml"
wait_for "controller" curl -fsS "http://127.0.0.1:$ADMIN_PORT/healthz"
start checker "$CPU_LOAD" "$BIN/proxy-pool-checker" run --controller "http://127.0.0.1:$CP_PORT" \
    --checker-id bench-checker --echo "127.0.0.1:$ECHO_PORT" --loopback-plaintext
ECHO_URL=http://127.0.0.1:$ECHO_PORT/bench

# The upstream proxies: every live simulator proxy, all assigned to the gateway (no
# extraction reserve). Wait until the gateway has used each of them (each then holds a
# pooled connection from the gateway).
sim_proxies() {
    curl -fsS -H "X-API-Key: $VENDOR_KEY" "http://127.0.0.1:$SIM_PORT/v1/sim/proxies"
}
all_used() {
    for _ in $(seq 1 $((NPROX * 2))); do
        curl -fsS --max-time 5 -x "http://$GW_USER:$GW_PASS@127.0.0.1:$GW_HTTP_PORT" "$ECHO_URL" >/dev/null || return 1
    done
    sim_proxies | jq -e --argjson n "$NPROX" '(.proxies | length) == $n and all(.proxies[]; .activeConnections > 0)'
}

gateway_up() { # binary name → GW_PID: started, holding a snapshot, serving through every upstream
    local bin=$1 name=$2 extra=()
    [ -n "${GATEWAY_WORKER_THREADS:-}" ] && extra=(--worker-threads "$GATEWAY_WORKER_THREADS")
    start "$name" "$CPU_PROXY" "$bin" "${extra[@]}" --http-listen "127.0.0.1:$GW_HTTP_PORT" \
        --socks5-listen "127.0.0.1:$GW_SOCKS_PORT" --admin-listen "127.0.0.1:$GW_ADMIN_PORT" \
        --controller "http://127.0.0.1:$CP_PORT" --worker-id bench-gateway \
        --clients-file "$DIR/gateway-clients.json"
    GW_PID=${PIDS[-1]}
    wait_for "$name snapshot" curl -fsS "http://127.0.0.1:$GW_ADMIN_PORT/readyz"
    wait_for "$name HTTP proxy" curl -fsS --max-time 5 -x "http://$GW_USER:$GW_PASS@127.0.0.1:$GW_HTTP_PORT" "$ECHO_URL"
    wait_for "$NPROX upstream proxies" all_used
}

gateway_down() { # stops GW_PID (SIGTERM, SIGKILL after PROC_STOP_TIMEOUT) and forgets it
    local i keep_pids=() keep_names=() deadline=$((SECONDS + PROC_STOP_TIMEOUT))
    kill -TERM "$GW_PID" 2>/dev/null || true
    while kill -0 "$GW_PID" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL "$GW_PID" 2>/dev/null || true
    wait "$GW_PID" 2>/dev/null || true
    for i in "${!PIDS[@]}"; do
        [ "${PIDS[$i]}" = "$GW_PID" ] && continue
        keep_pids+=("${PIDS[$i]}")
        keep_names+=("${NAMES[$i]}")
    done
    PIDS=("${keep_pids[@]}")
    NAMES=("${keep_names[@]}")
    GW_PID=
}

# ---------- measurement helpers ----------

LOADGEN=("$BIN/loadgen")
loadgen() { with_cpus "$CPU_LOAD" "${LOADGEN[@]}" "$@"; "${CMD[@]}"; }
proxy_args() { # system → --proxy arguments
    case "$1" in
        direct) for u in "${UPSTREAMS[@]}"; do printf -- '--proxy\n%s\n' "$u"; done ;;
        gateway) printf -- '--proxy\nhttp://%s:%s@127.0.0.1:%s\n' "$GW_USER" "$GW_PASS" "$GW_HTTP_PORT" ;;
        squid) printf -- '--proxy\nhttp://127.0.0.1:%s\n' "$SQUID_PORT" ;;
        glider) printf -- '--proxy\nhttp://127.0.0.1:%s\n' "$GLIDER_PORT" ;;
        relay) printf -- '--proxy\nhttp://127.0.0.1:%s\n' "$RELAY_PORT" ;;
    esac
}
pid_of() {
    case "$1" in
        gateway) echo "$GW_PID" ;;
        squid) echo "$SQUID_PID" ;;
        glider) echo "$GLIDER_PID" ;;
        relay) echo "$RELAY_PID" ;;
        *) echo "" ;;
    esac
}
cpu_ticks() { # pid → "utime stime" in clock ticks (0 0 for no process)
    [ -n "$1" ] || { echo 0 0; return; }
    awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"
}
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
TICK=$(getconf CLK_TCK)

# A tunnel per operation leaves ~2 loopback sockets per tunnel in TIME_WAIT for 60 s;
# tens of thousands of them make every later connect() search longer for a free port
# (kernel time charged to whoever connects). So every CONNECT phase, and the idle-tunnel
# phase, starts only once the previous phase's TIME_WAIT sockets are gone.
timewait() { awk '/^TCP:/ { for (i = 1; i < NF; i++) if ($i == "tw") print $(i + 1) }' /proc/net/sockstat; }
drain_timewait() {
    local start=$SECONDS
    while [ "$(timewait)" -gt 2000 ] && [ $((SECONDS - start)) -lt 75 ]; do sleep 1; done
    [ $((SECONDS - start)) -gt 1 ] && echo "  (waited $((SECONDS - start)) s for TIME_WAIT sockets to expire, $(timewait) left)"
    return 0
}

measure() { # name system mode [rate] → results/name.json (+ cpu_us_per_op, its user and
    # system parts cpu_user_us_per_op and cpu_sys_us_per_op)
    local name=$1 system=$2 mode=$3 rate=${4:-}
    local pid args before after
    [ "$mode" = connect ] && drain_timewait
    pid=$(pid_of "$system")
    mapfile -t args < <(proxy_args "$system")
    local extra=(--connections "$CONNS")
    [ -n "$rate" ] && extra=(--connections "$CONNS" --rate "$rate")
    before=$(cpu_ticks "$pid")
    loadgen run --mode "$mode" "${args[@]}" --target "$ECHO_URL" "${extra[@]}" \
        --duration "${SECONDS_PER_PHASE}s" --timeout 10s --format json > "$DIR/results/$name.json"
    after=$(cpu_ticks "$pid")
    local user sys
    read -r user sys < <(echo "$before $after" | awk '{ print $3 - $1, $4 - $2 }')
    jq --argjson u "$user" --argjson s "$sys" --argjson hz "$TICK" \
        'def per_op(t): if .ok > 0 and ($u + $s) > 0 then (t * 1000000 / $hz / .ok) else null end;
         . + {cpu_us_per_op: per_op($u + $s), cpu_user_us_per_op: per_op($u), cpu_sys_us_per_op: per_op($s)}' \
        "$DIR/results/$name.json" > "$DIR/results/$name.tmp" && mv "$DIR/results/$name.tmp" "$DIR/results/$name.json"
    jq -r --arg n "$name" '"  \($n): \(.ok) ok, \(.ops - .ok) failed \(.errors), \(.ok_per_s | floor)/s, p50 \(.latency.p50_us) µs, p99 \(.latency.p99_us) µs, cpu/op \(.cpu_us_per_op // "-") µs"' "$DIR/results/$name.json"
}
field() { jq -r "$2" "$DIR/results/$1.json"; }

# ---------- A/B: two gateway binaries alternated in one run ----------
# GATEWAY_BIN_B set: squid and direct are not measured. BENCH_AB_ROUNDS rounds; each
# round starts each binary in turn on the same stack (same worker ID, so it takes over
# the same proxies), warms it up, measures (a) keep-alive HTTP and (b) CONNECT tunnels
# with its CPU per operation, and stops it; odd rounds run A first, even rounds B, so a
# drift in the machine's load falls on both. Prints every round, the medians and B ÷ A.
if [ -n "${GATEWAY_BIN_B:-}" ]; then
    [ -x "$GATEWAY_BIN_B" ] || { echo "bench: GATEWAY_BIN_B $GATEWAY_BIN_B is not executable" >&2; exit 1; }
    ROUNDS=${BENCH_AB_ROUNDS:-5}
    declare -A AB_BIN=([A]=$GW_BIN [B]=$GATEWAY_BIN_B)
    echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg); A/B, $ROUNDS rounds of ${SECONDS_PER_PHASE}s phases, $CONNS connections, $NPROX upstreams, nice $NICE, cpus proxy='${CPU_PROXY:-any}' load='${CPU_LOAD:-any}', gateway --worker-threads ${GATEWAY_WORKER_THREADS:-default}"
    for side in A B; do
        echo "bench: $side = ${AB_BIN[$side]} ($(sha256sum "${AB_BIN[$side]}" | cut -c1-12))"
    done
    date -u +"bench: %Y-%m-%d %H:%M UTC"
    for r in $(seq 1 "$ROUNDS"); do
        order=(A B)
        [ $((r % 2)) = 0 ] && order=(B A)
        for side in "${order[@]}"; do
            echo "bench: round $r, $side"
            gateway_up "${AB_BIN[$side]}" "gateway-$side-$r"
            mapfile -t args < <(proxy_args gateway)
            loadgen run --mode http "${args[@]}" --target "$ECHO_URL" --connections "$CONNS" --duration 2s --format json >/dev/null
            measure "ab-$side-$r-http" gateway http
            measure "ab-$side-$r-connect" gateway connect
            gateway_down
        done
    done
    median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "null"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    series() { # side kind field → one value per round
        local r
        for r in $(seq 1 "$ROUNDS"); do jq -r "$3 // \"null\"" "$DIR/results/ab-$1-$r-$2.json"; done
    }
    echo
    echo "| figure | A (median) | B (median) | B ÷ A | A per round | B per round |"
    echo "|---|---:|---:|---:|---|---|"
    for kind in http connect; do
        for f in cpu_us_per_op ok_per_s; do
            a=$(series A "$kind" ".$f" | grep -v null | median)
            b=$(series B "$kind" ".$f" | grep -v null | median)
            label="$kind $( [ "$f" = cpu_us_per_op ] && echo 'CPU µs per op' || echo 'ops/s')"
            [ "$kind" = http ] && label="(a) keep-alive ${label#http }" || label="(b) CONNECT tunnel ${label#connect }"
            printf '| %s | %.2f | %.2f | %s | %s | %s |\n' "$label" "$a" "$b" \
                "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')" \
                "$(series A "$kind" ".$f" | awk '{ printf "%s%.1f", (NR > 1 ? " " : ""), $1 }')" \
                "$(series B "$kind" ".$f" | awk '{ printf "%s%.1f", (NR > 1 ? " " : ""), $1 }')"
        done
    done
    echo
    echo "bench: raw results in $DIR/results/ (ab-<side>-<round>-<phase>.json); load average now $(cut -d' ' -f1-3 /proc/loadavg)"
    exit 0
fi

gateway_up "$GW_BIN" gateway
sleep 3
sim_proxies > "$DIR/sim-proxies.json"
mapfile -t UPSTREAMS < <(jq -r '.proxies[] | "http://\(.username):\(.password)@\(.host):\(.port)"' "$DIR/sim-proxies.json")
[ "${#UPSTREAMS[@]}" = "$NPROX" ] || { echo "bench: expected $NPROX upstreams, got ${#UPSTREAMS[@]}" >&2; exit 1; }

# squid: parents = the same simulator proxies, round-robin; nothing cached, nothing logged
# per request, never direct.
SQ=$DIR/squid
{
    echo "# Generated by bench/gateway/run.sh."
    echo "http_port 127.0.0.1:$SQUID_PORT"
    echo "pid_filename $SQ/squid.pid"
    echo "cache_log $SQ/cache.log"
    echo "access_log none"
    echo "cache_store_log none"
    echo "logfile_rotate 0"
    echo "coredump_dir $SQ"
    echo "cache deny all"
    echo "cache_mem 0 MB"
    echo "memory_pools ${BENCH_SQUID_MEMORY_POOLS:-on}"
    echo "max_filedescriptors 65536"
    echo "workers 1"
    echo "via off"
    echo "forwarded_for transparent"
    echo "httpd_suppress_version_string on"
    echo "pinger_enable off"
    echo "netdb_filename none"
    echo "shutdown_lifetime 1 seconds"
    echo "client_persistent_connections on"
    echo "server_persistent_connections on"
    echo "http_access allow localhost"
    echo "http_access deny all"
    echo "never_direct allow all"
    i=0
    for u in "${UPSTREAMS[@]}"; do
        i=$((i + 1))
        rest=${u#http://}
        creds=${rest%@*}
        hostport=${rest##*@}
        echo "cache_peer ${hostport%:*} parent ${hostport##*:} 0 no-query no-digest no-netdb-exchange round-robin login=$creds connect-fail-limit=1000 name=sim$i"
    done
} > "$SQ/squid.conf"
SQUID_CMD=("$SQUID" -N -f "$SQ/squid.conf")
if [ "$(id -u)" = 0 ]; then
    SQUID_USER=proxy
    id "$SQUID_USER" >/dev/null 2>&1 || SQUID_USER=nobody
    chown -R "$SQUID_USER" "$SQ"
    SQUID_CMD=(setpriv --reuid="$SQUID_USER" --regid="$(id -g "$SQUID_USER")" --init-groups "${SQUID_CMD[@]}")
fi
"$SQUID" -k parse -f "$SQ/squid.conf" >"$DIR/logs/squid-parse.log" 2>&1 || { cat "$DIR/logs/squid-parse.log" >&2; exit 1; }
start squid "$CPU_PROXY" "${SQUID_CMD[@]}"
wait_for "squid" curl -fsS --max-time 5 -x "http://127.0.0.1:$SQUID_PORT" "$ECHO_URL"
SQUID_PID=$(cat "$SQ/squid.pid")

# glider: the same upstreams, round-robin, nothing probed (see the header).
GLIDER_ARGS=(-listen "http://127.0.0.1:$GLIDER_PORT" -strategy rr -check disable -maxfailures 0)
for u in "${UPSTREAMS[@]}"; do GLIDER_ARGS+=(-forward "$u"); done
start glider "$CPU_PROXY" "$GLIDER" "${GLIDER_ARGS[@]}"
GLIDER_PID=${PIDS[-1]}
wait_for "glider" curl -fsS --max-time 5 -x "http://127.0.0.1:$GLIDER_PORT" "$ECHO_URL"

# The floor: CONNECT only (curl -p tunnels through it).
RELAY_ARGS=(--listen "127.0.0.1:$RELAY_PORT")
[ -n "${GATEWAY_WORKER_THREADS:-}" ] && RELAY_ARGS+=(--threads "$GATEWAY_WORKER_THREADS")
for u in "${UPSTREAMS[@]}"; do RELAY_ARGS+=(--upstream "$u"); done
start relay "$CPU_PROXY" "$RELAY" "${RELAY_ARGS[@]}"
RELAY_PID=${PIDS[-1]}
wait_for "relay" curl -fsS --max-time 5 -p -x "http://127.0.0.1:$RELAY_PORT" "$ECHO_URL"

if [ "${BENCH_STAY_UP:-0}" = 1 ]; then
    # For profiling by hand: the stack stays up until Ctrl-C or SIGTERM.
    printf '%s\n' "gateway http://$GW_USER:$GW_PASS@127.0.0.1:$GW_HTTP_PORT (pid $GW_PID)" \
        "squid http://127.0.0.1:$SQUID_PORT (pid $SQUID_PID)" \
        "glider http://127.0.0.1:$GLIDER_PORT (pid $GLIDER_PID, $GLIDER)" \
        "relay http://127.0.0.1:$RELAY_PORT (pid $RELAY_PID, CONNECT only)" \
        "target $ECHO_URL" "simulator pid $SIM_PID" "upstreams:" "${UPSTREAMS[@]}" \
        > "$DIR/stack.txt"
    cat "$DIR/stack.txt"
    echo "bench: stack up (BENCH_STAY_UP=1); Ctrl-C stops it"
    while :; do sleep 1; done
fi

echo "bench: load average $(cut -d' ' -f1-3 /proc/loadavg); ${SECONDS_PER_PHASE}s phases, $CONNS connections, $NPROX upstreams, nice $NICE, cpus proxy='${CPU_PROXY:-any}' load='${CPU_LOAD:-any}', gateway --worker-threads ${GATEWAY_WORKER_THREADS:-default}, gateway binary $GW_BIN ($(sha256sum "$GW_BIN" | cut -c1-12))"
date -u +"bench: %Y-%m-%d %H:%M UTC"

echo "bench: glider $GLIDER_VERSION ($(sha256sum "$GLIDER" | cut -c1-12)), relay $RELAY ($(sha256sum "$RELAY" | cut -c1-12))"

echo "bench: warm-up"
for s in direct gateway squid glider; do
    mapfile -t args < <(proxy_args "$s")
    loadgen run --mode http "${args[@]}" --target "$ECHO_URL" --connections "$CONNS" --duration 2s --format json >/dev/null
done

echo "bench: (a) keep-alive HTTP, closed loop"
for s in direct gateway squid glider; do measure "http-$s" "$s" http; done
echo "bench: (b) CONNECT tunnels, closed loop"
for s in direct gateway relay squid glider; do measure "connect-$s" "$s" connect; done
drain_timewait
echo "bench: (c) open loop at 50 % of each proxy's max rate, alternating with direct at the same rate"
# Three alternating slices each; the added latency is the median over the slices of
# (proxy − direct), so a burst of unrelated load on the machine spoils one slice, not
# the figure. At each peer's rate the gateway is measured too (its slices between the
# peer's and direct's): gateway and peer compared at the same load.
SLICE=$(( (SECONDS_PER_PHASE + 1) / 2 ))
for s in gateway squid glider; do
    rate=$(field "http-$s" '(.ok_per_s / 2) | floor')
    for k in 1 2 3; do
        SECONDS_PER_PHASE=$SLICE measure "open-$s-$k" "$s" http "$rate"
        [ "$s" = gateway ] || SECONDS_PER_PHASE=$SLICE measure "open-gateway-at-$s-$k" gateway http "$rate"
        SECONDS_PER_PHASE=$SLICE measure "open-direct-for-$s-$k" direct http "$rate"
    done
done

[ "${BENCH_SKIP_IDLE:-0}" = 1 ] || echo "bench: (d) $TUNNELS idle CONNECT tunnels"
for s in gateway squid; do
    [ "${BENCH_SKIP_IDLE:-0}" = 1 ] && break
    drain_timewait
    pid=$(pid_of "$s")
    mapfile -t args < <(proxy_args "$s")
    before=$(rss_kib "$pid")
    with_cpus "$CPU_LOAD" "${LOADGEN[@]}" hold --mode connect "${args[@]}" --target "$ECHO_URL" \
        --tunnels "$TUNNELS" --connections 64 --seconds 120
    "${CMD[@]}" > "$DIR/results/hold-$s.out" &
    HOLD=$!
    for _ in $(seq 1 240); do grep -q '^ready' "$DIR/results/hold-$s.out" && break; sleep 0.5; done
    sleep 2
    after=$(rss_kib "$pid")
    held=$(awk '/^ready/ { print $2 }' "$DIR/results/hold-$s.out")
    kill -TERM "$HOLD" 2>/dev/null || true
    wait "$HOLD" 2>/dev/null || true
    echo "{\"rss_before_kib\": $before, \"rss_after_kib\": $after, \"tunnels\": ${held:-0}}" > "$DIR/results/idle-$s.json"
    echo "  $s: RSS $before → $after KiB with ${held:-0} idle tunnels $(grep '^error' "$DIR/results/hold-$s.out" | tr '\n' ' ')"
    sleep 2
done

# ---------- table ----------
r() { field "$1" "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && a != "null" && b != "-" && b != "null" && b > 0) printf "%.2f", a / b; else print "-" }'; }
num() { awk -v a="$1" 'BEGIN { if (a == "null" || a == "" || a == "-") print "-"; else printf "%.1f", a }'; }
rate_of() { awk -v a="$1" 'BEGIN { if (a == "null" || a == "") print "-"; else printf "%.0f", a }'; }
# A figure of a system with its ratio to direct's: "N (R×)".
vs_direct() { printf '%s (%s×)' "$(rate_of "$1")" "$(ratio "$1" "$2")"; }
failed() { # results name → ", N failed" when operations failed
    local n
    n=$(r "$1" '.ops - .ok')
    [ "$n" = 0 ] || printf ', %s failed' "$n"
}

dh=$(r http-direct .ok_per_s) gh=$(r http-gateway .ok_per_s) sh=$(r http-squid .ok_per_s) lh=$(r http-glider .ok_per_s)
dc=$(r connect-direct .ok_per_s) gc=$(r connect-gateway .ok_per_s) rc=$(r connect-relay .ok_per_s)
sc=$(r connect-squid .ok_per_s) lc=$(r connect-glider .ok_per_s)
echo
echo "| figure | direct (baseline) | gateway | relay (floor) | squid | glider | gateway ÷ relay | gateway ÷ squid | gateway ÷ glider |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
printf '| (a) keep-alive HTTP req/s | %.0f | %s | – | %s | %s | | %s | %s |\n' \
    "$dh" "$(vs_direct "$gh" "$dh")" "$(vs_direct "$sh" "$dh")" "$(vs_direct "$lh" "$dh")" \
    "$(ratio "$gh" "$sh")" "$(ratio "$gh" "$lh")"
printf '| (b) CONNECT tunnels/s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n' \
    "$dc" "$(vs_direct "$gc" "$dc")$(failed connect-gateway)" "$(vs_direct "$rc" "$dc")$(failed connect-relay)" \
    "$(vs_direct "$sc" "$dc")$(failed connect-squid)" "$(vs_direct "$lc" "$dc")$(failed connect-glider)" \
    "$(ratio "$gc" "$rc")" "$(ratio "$gc" "$sc")" "$(ratio "$gc" "$lc")"
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
added() { # results-prefix direct-prefix field → median over the slices of proxy − direct
    local k d=()
    for k in 1 2 3; do
        d+=($(( $(r "$1-$k" "$3") - $(r "$2-$k" "$3") )))
    done
    median3 "${d[@]}"
}
abs() { # results-prefix field → median over the slices
    median3 "$(r "$1-1" "$2")" "$(r "$1-2" "$2")" "$(r "$1-3" "$2")"
}
# P50/P99[system] at its own 50 % rate; [gateway@peer] at the peer's rate.
declare -A RATE P50 P99 ABS99
for s in gateway squid glider; do
    RATE[$s]=$(r "open-$s-1" .pacing.rate)
    P50[$s]=$(added "open-$s" "open-direct-for-$s" .latency.p50_us)
    P99[$s]=$(added "open-$s" "open-direct-for-$s" .latency.p99_us)
    ABS99[$s]=$(abs "open-$s" .latency.p99_us)
    ABS99[direct@$s]=$(abs "open-direct-for-$s" .latency.p99_us)
    [ "$s" = gateway ] && continue
    P50[gateway@$s]=$(added "open-gateway-at-$s" "open-direct-for-$s" .latency.p50_us)
    P99[gateway@$s]=$(added "open-gateway-at-$s" "open-direct-for-$s" .latency.p99_us)
    ABS99[gateway@$s]=$(abs "open-gateway-at-$s" .latency.p99_us)
done
lat() { printf '%s / %s (p99 %s)' "${P50[$1]}" "${P99[$1]}" "${ABS99[$1]}"; }
printf '| (c) added p50 / p99 (absolute p99), µs, at 50 %% of each one'"'"'s own max rate: %.0f / %.0f / %.0f/s | p99 %s / %s / %s | %s | – | %s | %s | | %s | %s |\n' \
    "${RATE[gateway]}" "${RATE[squid]}" "${RATE[glider]}" \
    "${ABS99[direct@gateway]}" "${ABS99[direct@squid]}" "${ABS99[direct@glider]}" \
    "$(lat gateway)" "$(lat squid)" "$(lat glider)" \
    "$(ratio "${P99[gateway]}" "${P99[squid]}")" "$(ratio "${P99[gateway]}" "${P99[glider]}")"
printf '| (c) the same at 50 %% of squid'"'"'s max rate, %.0f/s | p99 %s | %s | – | %s | – | | %s | |\n' \
    "${RATE[squid]}" "${ABS99[direct@squid]}" "$(lat gateway@squid)" "$(lat squid)" \
    "$(ratio "${P99[gateway@squid]}" "${P99[squid]}")"
printf '| (c) the same at 50 %% of glider'"'"'s max rate, %.0f/s | p99 %s | %s | – | – | %s | | | %s |\n' \
    "${RATE[glider]}" "${ABS99[direct@glider]}" "$(lat gateway@glider)" "$(lat glider)" \
    "$(ratio "${P99[gateway@glider]}" "${P99[glider]}")"
idle() { [ -f "$DIR/results/idle-$1.json" ] || { echo "-"; return; }; jq -r '((.rss_after_kib - .rss_before_kib) * 1024 / (if .tunnels > 0 then .tunnels else 1 end)) | floor' "$DIR/results/idle-$1.json"; }
gi=$(idle gateway) si=$(idle squid)
[ "$gi" = - ] || printf '| (d) RSS per idle tunnel, bytes | – | %s | – | %s | – | | %s | |\n' "$gi" "$si" "$(ratio "$gi" "$si")"
gcpu=$(r http-gateway .cpu_us_per_op) scpu=$(r http-squid .cpu_us_per_op) lcpu=$(r http-glider .cpu_us_per_op)
printf '| (e) CPU per keep-alive request, µs | – | %s | – | %s | %s | | %s | %s |\n' \
    "$(num "$gcpu")" "$(num "$scpu")" "$(num "$lcpu")" "$(ratio "$gcpu" "$scpu")" "$(ratio "$gcpu" "$lcpu")"
percore() { awk -v a="$1" 'BEGIN { if (a == "null" || a == "" || a <= 0) print "-"; else printf "%.0f", 1000000 / a }'; }
gk=$(percore "$gcpu") sk=$(percore "$scpu") lk=$(percore "$lcpu")
gcpu=$(r connect-gateway .cpu_us_per_op) rcpu=$(r connect-relay .cpu_us_per_op)
scpu=$(r connect-squid .cpu_us_per_op) lcpu=$(r connect-glider .cpu_us_per_op)
printf '| (e) CPU per CONNECT tunnel, µs | – | %s | %s | %s | %s | %s | %s | %s |\n' \
    "$(num "$gcpu")" "$(num "$rcpu")" "$(num "$scpu")" "$(num "$lcpu")" \
    "$(ratio "$gcpu" "$rcpu")" "$(ratio "$gcpu" "$scpu")" "$(ratio "$gcpu" "$lcpu")"
split() { printf '%s / %s' "$(num "$(r "$1" .cpu_user_us_per_op)")" "$(num "$(r "$1" .cpu_sys_us_per_op)")"; }
printf '| (e) of which user / system (kernel), µs | – | %s | %s | %s | %s | | | |\n' \
    "$(split connect-gateway)" "$(split connect-relay)" "$(split connect-squid)" "$(split connect-glider)"
printf '| keep-alive requests per CPU-second of the proxy | – | %s | – | %s | %s | | %s | %s |\n' \
    "$gk" "$sk" "$lk" "$(ratio "$gk" "$sk")" "$(ratio "$gk" "$lk")"
gt=$(percore "$gcpu") rt=$(percore "$rcpu") st=$(percore "$scpu") lt=$(percore "$lcpu")
printf '| CONNECT tunnels per CPU-second of the proxy | – | %s | %s | %s | %s | %s | %s | %s |\n' \
    "$gt" "$rt" "$st" "$lt" "$(ratio "$gt" "$rt")" "$(ratio "$gt" "$st")" "$(ratio "$gt" "$lt")"
echo

# The #21 targets, from the figures above.
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { if (v == "-") print "not measured"; else if (v + 0 <= t + 0) print "met"; else printf "not met (%.2f× the bound)", v / t }'; }
cpu_ratio=$(ratio "$gcpu" "$rcpu")
echo "bench: target #21.1, gateway CPU per tunnel ≤ 1.2 × the relay's: $cpu_ratio× — $(verdict "$cpu_ratio" 1.2)"
# The better peer: the smaller added p99 at its own 50 % rate. The gateway is judged at
# that peer's rate (the same load) and, for reference, at its own 50 % rate.
better=squid
[ "${P99[glider]}" -lt "${P99[squid]}" ] && better=glider
if [ "${P99[$better]}" -le 0 ]; then
    echo "bench: target #21.2, gateway added p99 ≤ 0.5 × the better peer's ($better, ${P99[$better]} µs): not measurable (the peer added nothing)"
else
    bound=$(awk -v p="${P99[$better]}" 'BEGIN { printf "%.0f", p / 2 }')
    for at in "gateway@$better" gateway; do
        where="at $better's rate, ${RATE[$better]}/s"
        [ "$at" = gateway ] && where="at its own 50 % rate, ${RATE[gateway]}/s"
        echo "bench: target #21.2, gateway added p99 ≤ 0.5 × the better peer's ($better: ${P99[$better]} µs → ≤ $bound µs), $where: ${P99[$at]} µs, $(ratio "${P99[$at]}" "${P99[$better]}")× — $(verdict "$(ratio "${P99[$at]}" "$bound")" 1)"
    done
fi
# How SO_REUSEPORT spread the connections over the gateway's data-plane workers.
spread=$(curl -fsS "http://127.0.0.1:$GW_ADMIN_PORT/metrics" 2>/dev/null | awk '/^proxy_pool_gateway_worker_connections_total/ { printf "%s ", $0 }' || true)
[ -n "$spread" ] && echo "bench: gateway connections per worker: $spread"
echo "bench: raw results in $DIR/results/; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
