//! Prints every Proxy Pool CRD as one multi-document YAML stream on stdout.
//!
//! `cargo run -p proxy-pool-operator --bin crdgen > crds/proxy-pool.yaml`

use std::io::Write;

fn main() -> anyhow::Result<()> {
    let yaml = proxy_pool_operator::crd::to_yaml()?;
    std::io::stdout().lock().write_all(yaml.as_bytes())?;
    Ok(())
}
