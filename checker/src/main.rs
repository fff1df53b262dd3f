//! `proxy-pool-checker` entry point.

fn main() {
    println!("proxy-pool-checker {}", env!("CARGO_PKG_VERSION"));
}
