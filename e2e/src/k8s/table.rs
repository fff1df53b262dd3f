//! `kubectl get` tables, and the columns kubectl shows for the Proxy Pool kinds.

/// `kubectl get <kind>` of an Upstream: its printer columns between NAME and AGE.
pub const UPSTREAM_COLUMNS: [&str; 7] = [
    "NAME",
    "PROTOCOL",
    "REGION",
    "MANAGED",
    "AVAILABLE",
    "READY",
    "AGE",
];
/// `kubectl get` columns of a Routing.
pub const ROUTING_COLUMNS: [&str; 7] = [
    "NAME",
    "STRATEGY",
    "PRIORITY",
    "GATEWAY GROUP",
    "READY REPLICAS",
    "READY",
    "AGE",
];
/// `kubectl get` columns of a GatewayGroup.
pub const GROUP_COLUMNS: [&str; 6] = [
    "NAME",
    "SERVICE TYPE",
    "REPLICAS",
    "READY REPLICAS",
    "READY",
    "AGE",
];
/// `kubectl get` columns of a DistributionClient.
pub const CLIENT_COLUMNS: [&str; 5] = ["NAME", "PERMISSIONS", "MAX EXTRACT", "READY", "AGE"];

/// `kubectl get` output cut into cells, the header first. A column starts where the
/// header has a word after two or more spaces (tabwriter pads with at least three; a
/// header may hold one space, "READY REPLICAS"); an empty cell is an empty string.
pub fn kubectl_table(text: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let bytes = header.as_bytes();
    let starts: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i] != b' ' && (i == 0 || (i >= 2 && &bytes[i - 2..i] == b"  ")))
        .collect();
    let cells = |line: &str| -> Vec<String> {
        starts
            .iter()
            .enumerate()
            .map(|(k, &from)| {
                let to = starts
                    .get(k + 1)
                    .copied()
                    .unwrap_or(line.len())
                    .min(line.len());
                line.get(from.min(line.len())..to)
                    .unwrap_or("")
                    .trim()
                    .to_owned()
            })
            .collect()
    };
    let mut rows = vec![cells(header)];
    rows.extend(lines.map(cells));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_follow_the_header_and_keep_empty_ones() {
        let text = "NAME    STRATEGY   READY REPLICAS   AGE\n\
                    a       p2c                         5s\n\
                    long-name   x  2   1m\n";
        let rows = kubectl_table(text);
        assert_eq!(rows[0], ["NAME", "STRATEGY", "READY REPLICAS", "AGE"]);
        assert_eq!(rows[1], ["a", "p2c", "", "5s"]);
        assert_eq!(rows.len(), 3);
    }
}
