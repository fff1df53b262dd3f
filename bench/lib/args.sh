# Shared by the bench scripts (sourced): their command line.
#
#   bench_args <name> "$@"
#
# `--no-build` sets BUILD=0 (BUILD=1 otherwise); `-h`/`--help` prints the script's
# header comment (the comment lines after the `#!` line) and exits; anything else is an
# error naming the script.
bench_args() {
    local name=$1
    shift
    BUILD=1
    while [ $# -gt 0 ]; do
        case "$1" in
            --no-build) BUILD=0; shift ;;
            -h|--help) awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$0"; exit 0 ;;
            *) echo "$name: unknown argument $1" >&2; exit 2 ;;
        esac
    done
}
