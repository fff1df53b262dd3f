//! `proxy-pool-gateway` entry point.

fn main() {
    println!("proxy-pool-gateway {}", env!("CARGO_PKG_VERSION"));
}
