# shellcheck shell=bash
# The loopback stack that scripts/dev-up.sh and bench/gateway/run.sh both start (sourced,
# not run).

# stack_admin_and_control_plane ADMIN-PORT CP-PORT: the controller config's admin
# listener and its control plane for gateways on loopback (plaintext), as YAML; more
# `controlPlane` keys may follow, indented by two spaces.
stack_admin_and_control_plane() {
    cat <<YAML
admin:
  listen: 127.0.0.1:$1
controlPlane:
  enabled: true
  listen: 127.0.0.1:$2
  loopbackPlaintext: true
YAML
}
