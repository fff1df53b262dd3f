//! Checks that a response conforms to `api/openapi/proxy-pool.yaml`: the status is
//! documented for the operation, the media type matches, and the body validates
//! against the schema (the JSON Schema subset the file uses).

use std::sync::OnceLock;

use serde_json::Value;

fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../api/openapi/proxy-pool.yaml"
        );
        let text = std::fs::read_to_string(path).expect("read the OpenAPI file");
        serde_yaml::from_str(&text).expect("the OpenAPI file is YAML")
    })
}

fn resolve(v: &Value) -> &Value {
    let mut v = v;
    while let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let mut cur = spec();
        for part in r.trim_start_matches("#/").split('/') {
            cur = &cur[part];
        }
        assert!(!cur.is_null(), "dangling $ref {r}");
        v = cur;
    }
    v
}

/// Panics unless the response conforms.
pub fn check(path: &str, method: &str, status: u16, content_type: Option<&str>, body: &[u8]) {
    let op = &spec()["paths"][path][method];
    if !op.is_object() {
        // An undocumented method on a documented path: only the problem shape is checked.
        assert_eq!(status, 405, "{method} {path} is not in the OpenAPI file");
        let json: Value = serde_json::from_slice(body).expect("a JSON body");
        let mut errors = Vec::new();
        validate(
            &serde_json::json!({"$ref": "#/components/schemas/Problem"}),
            &json,
            "$",
            &mut errors,
        );
        assert!(errors.is_empty(), "{errors:?}");
        return;
    }
    let responses = &op["responses"];
    let resp = responses
        .get(status.to_string())
        .or_else(|| responses.get("default"))
        .unwrap_or_else(|| panic!("{method} {path}: status {status} is not documented"));
    let resp = resolve(resp);
    let Some(content) = resp.get("content").and_then(Value::as_object) else {
        return;
    };
    let ct = content_type.unwrap_or_else(|| panic!("{status}: no Content-Type"));
    let essence = ct.split(';').next().unwrap_or("").trim();
    let media = content
        .get(essence)
        .unwrap_or_else(|| panic!("{method} {path} {status}: media type {essence} not documented"));
    if essence.ends_with("json") {
        let json: Value = serde_json::from_slice(body).expect("a JSON body");
        let mut errors = Vec::new();
        validate(&media["schema"], &json, "$", &mut errors);
        assert!(
            errors.is_empty(),
            "{method} {path} {status} does not conform: {errors:?}\n{json}"
        );
    }
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

/// Validates `v` against `schema`, collecting errors with their JSON path.
pub fn validate(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let s = resolve(schema);
    if let Some(t) = s.get("type") {
        let ok = match t {
            Value::String(t) => type_ok(t, v),
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)),
            _ => true,
        };
        if !ok {
            errors.push(format!("{at}: type {t} expected, got {v}"));
            return;
        }
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array)
        && !e.contains(v)
    {
        errors.push(format!("{at}: {v} not in enum"));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = s.get("minimum").and_then(Value::as_f64)
            && n < min
        {
            errors.push(format!("{at}: {n} < minimum {min}"));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64)
            && n > max
        {
            errors.push(format!("{at}: {n} > maximum {max}"));
        }
    }
    if let Some(text) = v.as_str() {
        let len = text.chars().count() as u64;
        if s.get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len < m)
        {
            errors.push(format!("{at}: shorter than minLength"));
        }
        if s.get("maxLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| len > m)
        {
            errors.push(format!("{at}: longer than maxLength"));
        }
        if s.get("format").and_then(Value::as_str) == Some("date-time")
            && !(text.len() >= 20 && text.as_bytes()[10] == b'T' && text.ends_with('Z'))
        {
            errors.push(format!("{at}: not a date-time"));
        }
    }
    if let Some(items) = v.as_array() {
        if s.get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| items.len() as u64 > m)
        {
            errors.push(format!("{at}: more than maxItems"));
        }
        if let Some(item_schema) = s.get("items") {
            for (i, item) in items.iter().enumerate() {
                validate(item_schema, item, &format!("{at}[{i}]"), errors);
            }
        }
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap_or_default();
            if !obj.contains_key(r) {
                errors.push(format!("{at}: missing required {r}"));
            }
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(ps, val, &format!("{at}.{k}"), errors),
                None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    errors.push(format!("{at}: unexpected property {k}"));
                }
                None => {}
            }
        }
    }
}
