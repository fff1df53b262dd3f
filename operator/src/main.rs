//! `proxy-pool-operator` entry point.

fn main() {
    println!("proxy-pool-operator {}", env!("CARGO_PKG_VERSION"));
}
