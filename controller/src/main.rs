//! `proxy-pool-controller` entry point.

fn main() {
    println!("proxy-pool-controller {}", env!("CARGO_PKG_VERSION"));
}
