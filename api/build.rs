//! Compiles the control-plane contract with a pure-Rust protobuf compiler (`protox`), so
//! no `protoc` is needed, and generates prost messages plus tonic clients and servers.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/controlplane/v1/controlplane.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let fds = protox::compile([PROTO], ["proto"])?;
    tonic_prost_build::configure()
        // Carries upstream passwords: its Debug is written by hand and redacts them.
        .skip_debug([".proxypool.controlplane.v1.UpstreamCredentials"])
        // Hand-written (`controlplane::wire`) so the controller can send a full snapshot
        // it encoded once, from cached per-proxy encodings, without rebuilding messages.
        .extern_path(
            ".proxypool.controlplane.v1.SnapshotUpdate",
            "crate::controlplane::wire::SnapshotUpdate",
        )
        .compile_fds(fds)?;
    Ok(())
}
