#!/usr/bin/env bash
# Gateway resident memory by snapshot size.
#
#   ./bench/memory/run.sh [--no-build]
#
# Writes a static snapshot file (`--snapshot-file`, the gateway's local mode) of N
# proxies for each size in BENCH_MEMORY_SIZES — labels like a fleet's (4 upstreams, 10
# regions, 25 cities per region, 4 carriers, both protocols, credentials on every proxy),
# two Routings (all proxies; one with `country`/`city` selectors) and one client — starts
# the gateway on it (release build; loopback listeners, no controller), waits until it
# serves, lets it settle and reads its VmRSS and VmHWM (/proc/<pid>/status). The
# 0-proxy run is the baseline: bytes per proxy = (RSS(N) − RSS(0)) ÷ N. The peak (HWM)
# includes the file being parsed next to the snapshot built from it: a controller-fed
# gateway decodes deltas instead, so RSS, not HWM, is the steady figure.
#
# Environment (all optional):
#   BENCH_MEMORY_SIZES  proxy counts (default "0 100000 1000000")
#   BENCH_PORT_BASE     first of 3 consecutive loopback ports (default 19400)
#   BENCH_DIR           files and logs (default .cache/bench-memory)
#   GATEWAY_BIN         the gateway binary (default $CARGO_TARGET_DIR/release/proxy-pool-gateway)
#   CARGO_TARGET_DIR    where the binary is built (default target)
set -euo pipefail

cd "$(dirname "$0")/../.."

# shellcheck source=bench/lib/args.sh
source "bench/lib/args.sh"
bench_args bench "$@"

SIZES=${BENCH_MEMORY_SIZES:-0 100000 1000000}
PORT=${BENCH_PORT_BASE:-19400}
DIR=${BENCH_DIR:-.cache/bench-memory}
TARGET=${CARGO_TARGET_DIR:-target}
GW_BIN=${GATEWAY_BIN:-$TARGET/release/proxy-pool-gateway}
mkdir -p "$DIR"

if [ "$BUILD" = 1 ]; then
    cargo build --release -q -p proxy-pool-gateway
fi
[ -x "$GW_BIN" ] || { echo "bench: no gateway binary at $GW_BIN" >&2; exit 1; }

snapshot_file() { # n path
    python3 - "$1" "$2" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
regions = ["shanghai", "beijing", "guangzhou", "shenzhen", "hangzhou",
           "chengdu", "wuhan", "xian", "nanjing", "tianjin"]
carriers = ["telecom", "unicom", "mobile", "broadnet"]
with open(path, "w") as f:
    f.write('{"routings": [')
    f.write(json.dumps({"name": "by-place", "match": {"usernameParams": {"pool": "place"}},
                        "selectors": {"country": "region", "city": "city"}}))
    f.write(", ")
    f.write(json.dumps({"name": "all"}))
    f.write('], "clients": [{"client": "bench", "username": "bench", "password": "bench"}], "proxies": [')
    for i in range(n):
        if i:
            f.write(",")
        f.write(json.dumps({
            "id": f"px-{i:07d}",
            "protocol": "http" if i % 2 == 0 else "socks5",
            "host": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "port": 8000 + i % 1000,
            "username": f"u{i:07d}",
            "password": f"p{i * 7919 % 10000000:07d}",
            "upstream": f"vendor-{i % 4}",
            "region": regions[i % 10],
            "city": f"{regions[i % 10]}-c{(i // 10) % 25:02d}",
            "carrier": carriers[i % 4],
            "maxConcurrent": 64,
        }, separators=(",", ":")))
    f.write("]}")
PY
}

status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

declare -A RSS HWM
for n in $SIZES; do
    file=$DIR/snapshot-$n.json
    [ -s "$file" ] || snapshot_file "$n" "$file"
    "$GW_BIN" --snapshot-file "$file" --reload-seconds 3600 \
        --http-listen "127.0.0.1:$PORT" --socks5-listen "127.0.0.1:$((PORT + 1))" \
        --admin-listen "127.0.0.1:$((PORT + 2))" >"$DIR/gateway-$n.log" 2>&1 &
    pid=$!
    ready=0
    for _ in $(seq 1 600); do
        if curl -fsS -o /dev/null "http://127.0.0.1:$((PORT + 2))/readyz" 2>/dev/null; then ready=1; break; fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    if [ "$ready" != 1 ] && [ "$n" != 0 ]; then
        kill "$pid" 2>/dev/null || true
        echo "bench: the gateway did not become ready with $n proxies (log: $DIR/gateway-$n.log)" >&2
        exit 1
    fi
    sleep 3
    RSS[$n]=$(status_kib "$pid" VmRSS)
    HWM[$n]=$(status_kib "$pid" VmHWM)
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
    echo "bench: $n proxies: RSS ${RSS[$n]} KiB, peak ${HWM[$n]} KiB ($(stat -c %s "$file") bytes of snapshot file)"
done

base=${RSS[0]:-}
echo
echo "| proxies | RSS, MiB | peak RSS, MiB | bytes per proxy (RSS over the 0-proxy run) |"
echo "|---:|---:|---:|---:|"
for n in $SIZES; do
    per=-
    [ -n "$base" ] && [ "$n" != 0 ] && per=$(( (RSS[$n] - base) * 1024 / n ))
    printf '| %s | %.1f | %.1f | %s |\n' "$n" "$(echo "${RSS[$n]} / 1024" | bc -l)" "$(echo "${HWM[$n]} / 1024" | bc -l)" "$per"
done
