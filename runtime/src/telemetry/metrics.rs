//! The metric convention every binary follows, defined once:
//!
//! - names are `proxy_pool_<component>_<what>[_<unit>]` with `<component>` the binary
//!   (`gateway`, `controller`, `checker`, `operator`): each binary registers into
//!   [`registry`], whose prefix adds `proxy_pool_<component>_`;
//! - base units (`_seconds`, `_bytes`), counters end in `_total` (the encoder adds it),
//!   label names in snake case and never one Prometheus or Kubernetes sets on the target
//!   (`namespace`, `pod`, `instance`, `job`, …);
//! - `proxy_pool_<component>_build_info{version}` is 1.
//!
//! [`exported`] and [`documented`] let a binary's metric-name test compare what it
//! serves with the metrics reference in `docs/operations.md`.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Label names a metric must not carry: the scrape adds them to every series, and a
/// metric's own would be renamed `exported_…` or overwrite the target's.
pub const RESERVED_LABELS: [&str; 6] = [
    "namespace",
    "pod",
    "instance",
    "job",
    "container",
    "service",
];

/// The registry of `component`: every metric registered in it is named
/// `proxy_pool_<component>_…`, and it already holds `build_info`.
pub fn registry(component: &str) -> Registry {
    let mut registry = Registry::with_prefix(format!("proxy_pool_{component}"));
    register_build_info(&mut registry);
    registry
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// Registers `build_info{version}` = 1 (the workspace version this binary was built at).
pub fn register_build_info(registry: &mut Registry) {
    let family = Family::<BuildLabels, Gauge>::default();
    family
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register(
        "build_info",
        "Build of this binary (always 1; the version is a label)",
        family,
    );
}

/// Metric name → type (`counter`, `gauge`, `histogram`, `info`, …) of an exposition in
/// the Prometheus text or OpenMetrics format, as users query them: a counter's name ends
/// in `_total`, an info's in `_info`, a histogram keeps its base name.
pub fn exported(exposition: &str) -> BTreeMap<String, String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let (name, kind) = rest.split_once(' ')?;
            let kind = kind.trim();
            let name = match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                "info" if !name.ends_with("_info") => format!("{name}_info"),
                _ => name.to_owned(),
            };
            Some((name, kind.to_owned()))
        })
        .collect()
}

/// Metric name → type of the rows of a Markdown table in `doc` whose first cell is a
/// back-quoted name starting with `proxy_pool_<component>_` and whose second cell is the
/// type: `| `proxy_pool_gateway_tunnels_total` | counter | … |`.
pub fn documented(doc: &str, component: &str) -> BTreeMap<String, String> {
    let prefix = format!("proxy_pool_{component}_");
    doc.lines()
        .filter_map(|line| {
            let mut cells = line.trim().strip_prefix('|')?.split('|').map(str::trim);
            let name = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            let kind = cells.next()?;
            name.starts_with(&prefix)
                .then(|| (name.to_owned(), kind.to_owned()))
        })
        .collect()
}

/// The metrics reference of the repository this crate was built from
/// (`docs/operations.md`, beside the `runtime/` directory): what the metric-name tests
/// of the binaries compare their exposition with.
pub fn reference_doc() -> std::io::Result<String> {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
}

/// Label names used in `exposition` that [`RESERVED_LABELS`] forbids, with the metric.
pub fn reserved_labels_used(exposition: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let labels = rest.split('}').next().unwrap_or_default();
        for pair in labels.split(',') {
            let label = pair.split('=').next().unwrap_or_default().trim();
            if RESERVED_LABELS.contains(&label) {
                found.push(format!("{name}: {label}"));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn the_registry_prefixes_and_holds_build_info() {
        let mut registry = registry("demo");
        registry.register("things", "Things", Counter::<u64>::default());
        let mut text = String::new();
        encode(&mut text, &registry).unwrap_or_default();
        let names = exported(&text);
        assert_eq!(
            names,
            BTreeMap::from([
                ("proxy_pool_demo_build_info".to_owned(), "gauge".to_owned()),
                (
                    "proxy_pool_demo_things_total".to_owned(),
                    "counter".to_owned()
                ),
            ]),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "proxy_pool_demo_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        assert!(reserved_labels_used(&text).is_empty());
    }

    #[test]
    fn documented_reads_the_component_rows_only() {
        let doc = "\
| Metric | Type | Labels | Meaning |
|---|---|---|---|
| `proxy_pool_gateway_tunnels_total` | counter | | Tunnels |
| `proxy_pool_gateway_open_connections` | gauge | `listener` | Open |
| `proxy_pool_controller_leader` | gauge | | Leader |
Text mentioning `proxy_pool_gateway_other_total` outside a table.
";
        assert_eq!(
            documented(doc, "gateway"),
            BTreeMap::from([
                (
                    "proxy_pool_gateway_open_connections".to_owned(),
                    "gauge".to_owned()
                ),
                (
                    "proxy_pool_gateway_tunnels_total".to_owned(),
                    "counter".to_owned()
                ),
            ])
        );
    }

    #[test]
    fn reserved_labels_are_found() {
        let text = "# TYPE a gauge\na{namespace=\"x\",kind=\"y\"} 1\nb{pod=\"p\"} 2\nc 3\n";
        assert_eq!(reserved_labels_used(text), ["a: namespace", "b: pod"]);
    }
}
