//! The extract request: strict JSON decoding (unknown fields are a 400), business
//! validation that names the field (422), the client's constraints (403), and the
//! canonical digest that idempotency compares.
//!
//! Pure functions over bytes and headers; no I/O.

use std::collections::HashSet;
use std::num::NonZeroU32;

use activity_pool::model::{
    Filters, Fulfillment, IdempotencyKey, Label, MAX_FILTER_VALUES, Protocol, RequestDigest,
    UpstreamId,
};
use axum::http::{HeaderMap, header};
use proxy_pool_api::config::{ClientGrants, FulfillmentDefault};
use serde::{Deserialize, Serialize};

use super::problem::ApiError;

/// The body as sent. Absent members are allowed; explicit `null`s are not.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Body {
    #[serde(default, deserialize_with = "present")]
    count: Option<serde_json::Number>,
    #[serde(default, deserialize_with = "present")]
    fulfillment: Option<String>,
    #[serde(default, deserialize_with = "present")]
    filters: Option<FilterBody>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FilterBody {
    #[serde(default, deserialize_with = "present")]
    protocols: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    regions: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    carriers: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    cities: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    allowed_upstreams: Option<Vec<String>>,
}

/// A member that is present must not be `null`.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// A JSON integer (`244` or `244.0`, as JSON Schema counts them); `None` otherwise.
fn integer(n: &serde_json::Number) -> Option<i64> {
    n.as_i64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    })
}

/// A validated extract request (before the client's constraints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtractInput {
    /// How many.
    pub count: NonZeroU32,
    /// Fulfilment (the server default applied).
    pub fulfillment: Fulfillment,
    /// Filters, each dimension sorted.
    pub filters: Filters,
}

/// The canonical form the digest is taken over.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Canonical<'a> {
    count: u32,
    fulfillment: &'static str,
    protocols: Vec<&'static str>,
    regions: Vec<&'a str>,
    carriers: Vec<&'a str>,
    /// Left out when empty: a request without cities digests as before the dimension
    /// existed (an idempotency key keeps replaying across the upgrade).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cities: Vec<&'a str>,
    allowed_upstreams: Vec<&'a str>,
}

impl ExtractInput {
    /// SHA-256 of the canonical request: the same logical request always digests alike.
    pub fn digest(&self) -> RequestDigest {
        let c = Canonical {
            count: self.count.get(),
            fulfillment: match self.fulfillment {
                Fulfillment::Partial => "partial",
                Fulfillment::AllOrNothing => "allOrNothing",
            },
            protocols: self.filters.protocols.iter().map(|p| p.as_str()).collect(),
            regions: self.filters.regions.iter().map(Label::as_str).collect(),
            carriers: self.filters.carriers.iter().map(Label::as_str).collect(),
            cities: self.filters.cities.iter().map(Label::as_str).collect(),
            allowed_upstreams: self
                .filters
                .upstreams
                .iter()
                .map(UpstreamId::as_str)
                .collect(),
        };
        RequestDigest::of(&serde_json::to_vec(&c).unwrap_or_default())
    }

    /// A short, secret-free summary for the access log, e.g. `regions=[sh,bj] protocols=[http]`.
    pub fn filter_summary(&self) -> String {
        fn dim(out: &mut String, name: &str, values: &[&str]) {
            if values.is_empty() {
                return;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            let shown: Vec<&str> = values.iter().take(4).copied().collect();
            out.push_str(&format!("{name}=[{}", shown.join(",")));
            if values.len() > 4 {
                out.push_str(&format!(",+{}", values.len() - 4));
            }
            out.push(']');
        }
        let f = &self.filters;
        let mut s = String::new();
        dim(
            &mut s,
            "protocols",
            &f.protocols.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        );
        dim(
            &mut s,
            "regions",
            &f.regions.iter().map(Label::as_str).collect::<Vec<_>>(),
        );
        dim(
            &mut s,
            "carriers",
            &f.carriers.iter().map(Label::as_str).collect::<Vec<_>>(),
        );
        dim(
            &mut s,
            "cities",
            &f.cities.iter().map(Label::as_str).collect::<Vec<_>>(),
        );
        dim(
            &mut s,
            "upstreams",
            &f.upstreams
                .iter()
                .map(UpstreamId::as_str)
                .collect::<Vec<_>>(),
        );
        if s.is_empty() { "any".to_owned() } else { s }
    }
}

/// 415 unless the body is declared `application/json` (parameters allowed).
pub fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(v) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::UnsupportedMediaType);
    };
    let v = v.to_str().map_err(|_| ApiError::UnsupportedMediaType)?;
    let essence = v.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// The optional `Idempotency-Key` (quoted or bare).
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    let bad = |reason| ApiError::InvalidHeader {
        header: "Idempotency-Key",
        reason,
    };
    if values.next().is_some() {
        return Err(bad("must appear at most once"));
    }
    let text = v
        .to_str()
        .map_err(|_| bad("must be printable ASCII"))?
        .trim();
    let text = match text.strip_prefix('"') {
        Some(rest) => rest.strip_suffix('"').ok_or(bad("unbalanced quotes"))?,
        None => text,
    };
    if text.contains('"') {
        return Err(bad("must not contain double quotes"));
    }
    IdempotencyKey::new(text)
        .map(Some)
        .map_err(|_| bad("must be 1 to 255 printable ASCII characters without spaces"))
}

fn validation(field: impl Into<String>, reason: impl Into<String>) -> ApiError {
    ApiError::Validation {
        field: field.into(),
        reason: reason.into(),
    }
}

/// Decodes and validates the body.
pub fn parse_body(
    bytes: &[u8],
    max_count: NonZeroU32,
    default_fulfillment: FulfillmentDefault,
) -> Result<ExtractInput, ApiError> {
    let body: Body = serde_json::from_slice(bytes).map_err(|e| {
        let msg = e.to_string();
        // serde_json messages name the field and position, never other input.
        ApiError::InvalidJson(msg.chars().take(200).collect())
    })?;
    let count = match body.count.as_ref().map(integer) {
        None => return Err(validation("count", "is required")),
        Some(None) => {
            return Err(ApiError::InvalidJson("count must be an integer".to_owned()));
        }
        Some(Some(n)) => Some(n),
    };
    let count = match count {
        None => return Err(validation("count", "is required")),
        Some(n) if n < 1 => return Err(validation("count", "must be at least 1")),
        Some(n) if n > i64::from(max_count.get()) => {
            return Err(validation(
                "count",
                format!("must not exceed maxCountPerRequest ({})", max_count.get()),
            ));
        }
        Some(n) => u32::try_from(n)
            .ok()
            .and_then(NonZeroU32::new)
            .ok_or_else(|| validation("count", "out of range"))?,
    };
    let fulfillment = match body.fulfillment.as_deref() {
        None => match default_fulfillment {
            FulfillmentDefault::Partial => Fulfillment::Partial,
            FulfillmentDefault::AllOrNothing => Fulfillment::AllOrNothing,
        },
        Some("partial") => Fulfillment::Partial,
        Some("allOrNothing") => Fulfillment::AllOrNothing,
        Some(_) => {
            return Err(validation(
                "fulfillment",
                "must be one of partial, allOrNothing",
            ));
        }
    };
    let f = body.filters.unwrap_or_default();
    let label =
        |s: &str| Label::new(s).map_err(|_| "must be 1 to 64 characters of A-Z a-z 0-9 . _ : -");
    let filters = Filters {
        protocols: dimension("filters.protocols", f.protocols, |s| {
            Protocol::parse(s).ok_or("must be one of http, socks5")
        })?,
        regions: dimension("filters.regions", f.regions, label)?,
        carriers: dimension("filters.carriers", f.carriers, label)?,
        cities: dimension("filters.cities", f.cities, label)?,
        upstreams: dimension("filters.allowedUpstreams", f.allowed_upstreams, |s| {
            UpstreamId::new(s).map_err(|_| "must be 1 to 63 characters of A-Z a-z 0-9 . _ : -")
        })?,
    };
    Ok(ExtractInput {
        count,
        fulfillment,
        filters,
    })
}

fn dimension<T: Ord>(
    path: &str,
    values: Option<Vec<String>>,
    parse: impl Fn(&str) -> Result<T, &'static str>,
) -> Result<Vec<T>, ApiError> {
    let values = values.unwrap_or_default();
    if values.len() > MAX_FILTER_VALUES {
        return Err(validation(
            path,
            format!("at most {MAX_FILTER_VALUES} values"),
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        if !seen.insert(v.as_str()) {
            return Err(validation(format!("{path}[{i}]"), "duplicate value"));
        }
        out.push(parse(v).map_err(|r| validation(format!("{path}[{i}]"), r))?);
    }
    out.sort();
    Ok(out)
}

/// Applies the credential's grants: count limit, and upstream / region sets that a
/// request can only narrow (an omitted filter becomes the allowed set). Cities need no
/// grant of their own: a city filter is ANDed with the regions, which the region grant
/// already bounds, so it can only narrow what the client may take.
pub fn apply_constraints(input: &mut ExtractInput, grants: &ClientGrants) -> Result<(), ApiError> {
    if let Some(limit) = grants.max_extract_count
        && input.count > limit
    {
        return Err(ApiError::CountAboveClientLimit {
            requested: input.count.get(),
            limit: limit.get(),
        });
    }
    narrow(
        &mut input.filters.upstreams,
        &grants.allowed_upstreams,
        "filters.allowedUpstreams",
        "UPSTREAM_NOT_ALLOWED",
        UpstreamId::new,
        UpstreamId::as_str,
    )?;
    narrow(
        &mut input.filters.regions,
        &grants.allowed_regions,
        "filters.regions",
        "REGION_NOT_ALLOWED",
        Label::new,
        Label::as_str,
    )?;
    Ok(())
}

fn narrow<T: Ord, E>(
    requested: &mut Vec<T>,
    allowed: &[String],
    path: &str,
    code: &'static str,
    make: impl Fn(String) -> Result<T, E>,
    name: impl Fn(&T) -> &str,
) -> Result<(), ApiError> {
    if allowed.is_empty() {
        return Ok(());
    }
    if requested.is_empty() {
        let mut all = allowed
            .iter()
            .map(|a| make(a.clone()).map_err(|_| ApiError::Internal))
            .collect::<Result<Vec<_>, _>>()?;
        all.sort();
        *requested = all;
        return Ok(());
    }
    if let Some(i) = requested
        .iter()
        .position(|r| !allowed.iter().any(|a| a == name(r)))
    {
        return Err(ApiError::FilterNotAllowed {
            field: format!("{path}[{i}]"),
            code,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ExtractInput, ApiError> {
        parse_body(
            body.as_bytes(),
            NonZeroU32::new(10).expect("10"),
            FulfillmentDefault::Partial,
        )
    }

    fn field(e: ApiError) -> String {
        match e {
            ApiError::Validation { field, .. } => field,
            other => panic!("not a validation error: {other:?}"),
        }
    }

    #[test]
    fn the_seed_example_parses() {
        let i = parse(r#"{"count":5,"fulfillment":"partial","filters":{"protocols":["http"],"regions":["shanghai"],"carriers":["telecom"],"cities":["pudong"],"allowedUpstreams":["provider-a"]}}"#)
            .expect("valid");
        assert_eq!(i.count.get(), 5);
        assert_eq!(i.filters.upstreams[0].as_str(), "provider-a");
        assert_eq!(i.filters.cities[0].as_str(), "pudong");
        assert_eq!(
            i.filter_summary(),
            "protocols=[http] regions=[shanghai] carriers=[telecom] cities=[pudong] upstreams=[provider-a]"
        );
    }

    #[test]
    fn shape_errors_are_400_and_business_errors_name_the_field() {
        assert!(matches!(
            parse(r#"{"count":1,"extra":1}"#),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(
            parse(r#"{"count":"1"}"#),
            Err(ApiError::InvalidJson(_))
        ));
        assert!(matches!(parse("not json"), Err(ApiError::InvalidJson(_))));
        assert_eq!(field(parse("{}").unwrap_err()), "count");
        assert_eq!(field(parse(r#"{"count":0}"#).unwrap_err()), "count");
        assert_eq!(field(parse(r#"{"count":11}"#).unwrap_err()), "count");
        assert_eq!(
            field(parse(r#"{"count":1,"fulfillment":"most"}"#).unwrap_err()),
            "fulfillment"
        );
        assert_eq!(
            field(parse(r#"{"count":1,"filters":{"protocols":["http","ftp"]}}"#).unwrap_err()),
            "filters.protocols[1]"
        );
        assert_eq!(
            field(parse(r#"{"count":1,"filters":{"regions":["a","a"]}}"#).unwrap_err()),
            "filters.regions[1]"
        );
        assert_eq!(
            field(parse(r#"{"count":1,"filters":{"cities":["paris","new york"]}}"#).unwrap_err()),
            "filters.cities[1]"
        );
        assert!(matches!(
            parse(r#"{"count":1,"filters":{"cities":null}}"#),
            Err(ApiError::InvalidJson(_))
        ));
        let many: Vec<String> = (0..65).map(|i| format!("\"r{i}\"")).collect();
        let body = format!(
            r#"{{"count":1,"filters":{{"carriers":[{}]}}}}"#,
            many.join(",")
        );
        assert_eq!(field(parse(&body).unwrap_err()), "filters.carriers");
    }

    #[test]
    fn digests_ignore_filter_order() {
        let a = parse(r#"{"count":2,"filters":{"regions":["b","a"]}}"#).expect("a");
        let b = parse(r#"{"count":2,"fulfillment":"partial","filters":{"regions":["a","b"]}}"#)
            .expect("b");
        assert_eq!(a.digest(), b.digest());
        let c = parse(r#"{"count":3,"filters":{"regions":["a","b"]}}"#).expect("c");
        assert_ne!(a.digest(), c.digest());
        // Cities are part of the request; without them the digest is the one taken
        // before the dimension existed (SHA-256 of the canonical JSON without
        // `cities`), so an idempotency key replays across the upgrade.
        let city =
            parse(r#"{"count":2,"filters":{"regions":["a","b"],"cities":["x"]}}"#).expect("city");
        assert_ne!(a.digest(), city.digest());
        assert_eq!(
            a.digest().as_str(),
            "3376c466370dfc24a3a50757363edb12018e7c27093ba53c8d4463892290015d"
        );
    }

    proptest::proptest! {
        /// Untrusted bytes never panic the decoder, and what it accepts is in range,
        /// sorted and free of duplicates.
        #[test]
        fn any_bytes_decode_safely(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            check(&bytes);
        }

        #[test]
        fn json_like_bodies_decode_safely(
            count in -3i64..300,
            regions in proptest::collection::vec("[a-z]{0,3}", 0..70),
            extra in proptest::option::of("[a-z]{1,8}"),
        ) {
            let body = serde_json::json!({"count": count, "filters": {"regions": regions}});
            let mut text = body.to_string();
            if let Some(x) = extra {
                text = text.replacen('{', &format!("{{\"{x}\":1,"), 1);
            }
            check(text.as_bytes());
        }
    }

    fn check(bytes: &[u8]) {
        if let Ok(i) = parse_body(
            bytes,
            NonZeroU32::new(200).expect("200"),
            FulfillmentDefault::Partial,
        ) {
            assert!((1..=200).contains(&i.count.get()));
            assert!(i.filters.regions.windows(2).all(|w| w[0] < w[1]));
            assert!(i.filters.regions.len() <= MAX_FILTER_VALUES);
        }
    }

    #[test]
    fn idempotency_keys_may_be_quoted() {
        let mut h = HeaderMap::new();
        h.insert("idempotency-key", "\"abc-1\"".parse().expect("v"));
        assert_eq!(
            idempotency_key(&h).expect("ok").expect("some").as_str(),
            "abc-1"
        );
        h.insert("idempotency-key", "abc-1".parse().expect("v"));
        assert_eq!(
            idempotency_key(&h).expect("ok").expect("some").as_str(),
            "abc-1"
        );
        h.insert("idempotency-key", "\"abc".parse().expect("v"));
        assert!(idempotency_key(&h).is_err());
    }
}
