# Child-process supervision shared by scripts/dev-up.sh and bench/gateway/run.sh
# (sourced, not run). Before sourcing set:
#   PROC_TAG   prefix of every message (e.g. "dev-up")
#   PROC_LOGS  directory of the per-process logs (<name>.log)
# and optionally PROC_READY_TIMEOUT (seconds, default 120) and PROC_STOP_TIMEOUT
# (seconds, default 20). Every process started with `proc_start` runs in its own process
# group and gets SIGTERM on exit, Ctrl-C or SIGTERM (newest first), SIGKILL when it
# outlives PROC_STOP_TIMEOUT.

PIDS=()
NAMES=()
STOPPING=0

stop_all() {
    [ "$STOPPING" = 1 ] && return
    STOPPING=1
    # Whatever happens to our stdout (a closed pipe), the children are stopped.
    set +e
    trap '' INT TERM PIPE
    echo 2>/dev/null
    echo "$PROC_TAG: stopping" 2>/dev/null
    [ -n "${PROC_IDLE_PID:-}" ] && kill "$PROC_IDLE_PID" 2>/dev/null
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    done
    local deadline=$((SECONDS + ${PROC_STOP_TIMEOUT:-20}))
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        while kill -0 "${PIDS[$i]}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        if kill -0 "${PIDS[$i]}" 2>/dev/null; then
            echo "$PROC_TAG: ${NAMES[$i]} did not stop, killing it" >&2
            kill -KILL "${PIDS[$i]}" 2>/dev/null || true
        fi
        wait "${PIDS[$i]}" 2>/dev/null || true
    done
    echo "$PROC_TAG: stopped" 2>/dev/null
}
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM
trap 'stop_all' EXIT
trap 'exit 141' PIPE

proc_start() { # name command...  (in the background; $! is the process itself)
    local name=$1
    shift
    # In a process group of its own (setsid execs in place: without job control the
    # child is not a group leader), so a terminal's Ctrl-C reaches only this script,
    # whose trap stops the children newest first, not every child at once.
    setsid "$@" >"$PROC_LOGS/$name.log" 2>&1 &
    PIDS+=($!)
    NAMES+=("$name")
}

proc_idle() { # seconds: sleep interruptibly (a signal's trap runs at once, and
    # stop_all ends the sleep too, so nothing outlives the script)
    sleep "$1" &
    PROC_IDLE_PID=$!
    wait "$PROC_IDLE_PID" || true
}

fail() {
    echo "$PROC_TAG: $*" >&2
    echo "$PROC_TAG: logs in $PROC_LOGS/" >&2
    exit 1
}

wait_for() { # what command...  (until the command succeeds; fails if a child exits)
    local what=$1
    shift
    local deadline=$((SECONDS + ${PROC_READY_TIMEOUT:-120}))
    until "$@" >/dev/null 2>&1; do
        local i
        for i in "${!PIDS[@]}"; do
            kill -0 "${PIDS[$i]}" 2>/dev/null || fail "${NAMES[$i]} exited (see $PROC_LOGS/${NAMES[$i]}.log)"
        done
        [ $SECONDS -lt $deadline ] || fail "timed out waiting for $what"
        sleep 0.5
    done
    echo "$PROC_TAG: $what ok"
}
