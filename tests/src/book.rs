//! The book's reference pages, written from the code: every setting from
//! the settings types' doc comments and defaults, every admin route from
//! the OpenAPI document, every metric from the registry.
//! `tests/tests/book.rs` holds the pages in `docs/src/reference/` to these
//! (`ANKUSA_BLESS=1` writes them).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// How each page says where it comes from.
const GENERATED: &str = "<!-- Generated from the code by `ANKUSA_BLESS=1 cargo test -p ankusa-tests --test book`; \
                         edit the doc comments, not this page. -->";

/// `docs/src/reference/configuration.md`.
pub fn configuration() -> String {
    use ankusa::config::Config;
    use utoipa::{PartialSchema, ToSchema};

    let mut components = Vec::new();
    Config::schemas(&mut components);
    let components: BTreeMap<String, Value> =
        components.into_iter().map(|(name, schema)| (name, to_json(&schema))).collect();
    let root = to_json(&Config::schema());
    let defaults = ankusa::settings::hiding_secrets(|| serde_json::to_value(Config::default())).expect("defaults");
    // Sections that are absent by default, with the defaults they take
    // once written.
    let given = |component: &str| -> Value {
        let value = match component {
            "SinkSettings" => serde_json::to_value(ankusa::runtime::SinkSettings::default()),
            "SourceSection" => serde_json::to_value(ankusa::source::SourceSection::default()),
            "TlsSettings" => serde_json::to_value(ankusa::runtime::tls::TlsSettings::default()),
            "VerifySection" => serde_json::to_value(ankusa::source::VerifySection::default()),
            "DedupeKeySection" => serde_json::to_value(ankusa::source::DedupeKeySection::default()),
            _ => Ok(Value::Null),
        };
        value.expect("serializes")
    };

    let mut page = Reference { components: &components, given: &given, out: String::new() };
    page.out.push_str(&format!(
        "# Configuration reference\n\n{GENERATED}\n\nEvery key of `ankusa.yml`, its type, its default and what it \
         does. A file names only what differs from the defaults; `ankusa print-config` prints the whole \
         configuration in force. `${{VAR}}` takes a value from the environment, and \
         `ANKUSA_<SECTION>__<KEY>=value` overrides any key (see [Configuration](../guide/configuration.md)).\n"
    ));
    page.section("", &root, &defaults);
    page.out
}

struct Reference<'a> {
    components: &'a BTreeMap<String, Value>,
    given: &'a dyn Fn(&str) -> Value,
    out: String,
}

impl Reference<'_> {
    /// The schema `schema` points at, and its component's name.
    fn resolve<'s>(&'s self, schema: &'s Value) -> (&'s Value, Option<&'s str>) {
        if let Some(name) = reference(schema) {
            return (self.components.get(name).unwrap_or(schema), Some(name));
        }
        for combined in ["oneOf", "anyOf", "allOf"] {
            if let Some(Value::Array(items)) = schema.get(combined)
                && let Some(name) = items.iter().find_map(reference)
            {
                return (self.components.get(name).unwrap_or(schema), Some(name));
            }
        }
        (schema, None)
    }

    /// One table of the keys of the object at `at`, then a table for each
    /// object inside it.
    fn section(&mut self, at: &str, schema: &Value, defaults: &Value) {
        let Some(Value::Object(properties)) = schema.get("properties") else { return };
        let mut nested = Vec::new();
        let mut rows = String::new();
        for (name, field) in properties {
            let key = if at.is_empty() { name.clone() } else { format!("{at}.{name}") };
            let (target, component) = self.resolve(field);
            let description = field_text(field).or_else(|| text(target)).unwrap_or_default();
            let default = defaults.get(name).cloned().unwrap_or(Value::Null);
            if target.get("properties").is_some() {
                let default = if default.is_null() { component.map(self.given).unwrap_or_default() } else { default };
                nested.push((key, target.clone(), default, description));
                continue;
            }
            if let Some(values) = target.get("additionalProperties").filter(|v| v.is_object()) {
                let (entry, component) = self.resolve(values);
                if entry.get("properties").is_some() {
                    let default = component.map(self.given).unwrap_or_default();
                    nested.push((format!("{key}.{{name}}"), entry.clone(), default, description));
                    continue;
                }
            }
            if at.is_empty() {
                // A top-level key that is not a section of its own.
                nested.push((key, target.clone(), default, description));
                continue;
            }
            let _ =
                writeln!(rows, "| `{key}` | {} | {} | {} |", self.type_of(field), shown(&default), cell(&description));
        }
        if !rows.is_empty() {
            self.out.push_str("\n| key | type | default | what it does |\n|---|---|---|---|\n");
            self.out.push_str(&rows);
        }
        for (key, schema, default, description) in nested {
            let _ = write!(self.out, "\n## `{key}`\n\n");
            // "`dispatch.retry`: what it is" under a heading that names it.
            let description = match description.strip_prefix('`').and_then(|d| d.split_once("`: ")) {
                Some((_, rest)) => rest.to_string(),
                None => description,
            };
            if !description.is_empty() {
                let mut description = description.replace('\n', " ");
                if let Some(first) = description.get(..1) {
                    description.replace_range(..1, &first.to_uppercase());
                }
                let _ = writeln!(self.out, "{description}");
            }
            self.section(&key, &schema, &default);
        }
    }

    fn type_of(&self, schema: &Value) -> String {
        let (target, _) = self.resolve(schema);
        if let Some(Value::Array(values)) = target.get("enum") {
            let values: Vec<String> =
                values.iter().filter(|v| !v.is_null()).map(|v| format!("`{}`", plain(v))).collect();
            return format!("one of {}", values.join(", "));
        }
        if let Some(Value::Array(choices)) = target.get("oneOf") {
            let choices: Vec<String> = choices.iter().filter(|c| !is_null(c)).map(|c| self.type_of(c)).collect();
            return choices.join(" or ");
        }
        let kinds: Vec<&str> = match target.get("type") {
            Some(Value::String(kind)) => vec![kind.as_str()],
            Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).filter(|k| *k != "null").collect(),
            _ => Vec::new(),
        };
        match kinds.first().copied() {
            Some("array") => format!("list of {}", target.get("items").map_or("any".into(), |i| self.type_of(i))),
            Some("object") => match target.get("additionalProperties") {
                Some(values) if values.is_object() => format!("map of {}", self.type_of(values)),
                _ => "object".into(),
            },
            Some(kind) => kind.to_string(),
            None => "any".into(),
        }
    }
}

/// `docs/src/reference/admin-api.md`.
pub fn admin_api() -> String {
    let document = to_json(ankusa::admin::document());
    let mut out = format!(
        "# Admin API\n\n{GENERATED}\n\nThe admin listener (`admin.listen`, `127.0.0.1:4002` by default) serves \
         these routes; its OpenAPI 3.1 document is at `/openapi.json`. With `admin.token` set, every route but \
         `/health` and `/ready` wants `Authorization: Bearer <token>`. Every refusal is \
         `{{\"error\": code, \"message\": …, \"details\": …}}`.\n"
    );
    let Some(Value::Object(paths)) = document.get("paths") else { return out };
    for (path, item) in paths {
        let Value::Object(operations) = item else { continue };
        for method in ["get", "post", "put", "patch", "delete"] {
            let Some(operation) = operations.get(method) else { continue };
            let _ = write!(out, "\n## `{} {path}`\n\n", method.to_uppercase());
            for field in ["summary", "description"] {
                if let Some(said) = operation.get(field).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    let _ = writeln!(out, "{}\n", said.trim());
                }
            }
            if let Some(Value::Array(parameters)) = operation.get("parameters") {
                out.push_str("| parameter | in | required | what it is |\n|---|---|---|---|\n");
                for p in parameters {
                    let _ = writeln!(
                        out,
                        "| `{}` | {} | {} | {} |",
                        plain(&p["name"]),
                        plain(&p["in"]),
                        if p["required"].as_bool() == Some(true) { "yes" } else { "no" },
                        cell(&text(p).unwrap_or_default())
                    );
                }
                out.push('\n');
            }
            if let Some(Value::Object(content)) = operation.pointer("/requestBody/content") {
                let types: Vec<String> = content.keys().map(|k| format!("`{k}`")).collect();
                let _ = writeln!(out, "Request body: {}.\n", types.join(", "));
            }
            if let Some(Value::Object(responses)) = operation.get("responses") {
                out.push_str("| answer | when |\n|---|---|\n");
                for (status, response) in responses {
                    let _ = writeln!(out, "| {status} | {} |", cell(&text(response).unwrap_or_default()));
                }
            }
        }
    }
    out
}

/// `docs/src/reference/metrics.md`.
pub fn metrics() -> String {
    let mut out = format!(
        "# Metrics\n\n{GENERATED}\n\n`GET /metrics` on the admin listener, in the Prometheus text format. \
         A counter's samples carry `_total`.\n\n| metric | type | what it tells |\n|---|---|---|\n"
    );
    for metric in ankusa::metrics::metrics().described() {
        let _ = writeln!(out, "| `{}` | {} | {} |", metric.name, metric.kind, cell(metric.help));
    }
    out
}

fn to_json(value: &impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("a schema serializes")
}

fn reference(schema: &Value) -> Option<&str> {
    schema.get("$ref").and_then(Value::as_str).and_then(|r| r.rsplit('/').next())
}

/// A field's doc comment: on the field, or (for a field of a type of ours)
/// on the reference to that type.
fn field_text(field: &Value) -> Option<String> {
    text(field).or_else(|| {
        ["oneOf", "anyOf", "allOf"].iter().find_map(|combined| match field.get(*combined) {
            Some(Value::Array(items)) => items.iter().find_map(text),
            _ => None,
        })
    })
}

fn is_null(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn text(schema: &Value) -> Option<String> {
    schema.get("description").and_then(Value::as_str).map(str::to_string)
}

fn plain(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_string)
}

/// A default as the file writes it.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "—".into(),
        Value::String(s) if s.is_empty() => "`\"\"`".into(),
        Value::String(s) => format!("`{s}`"),
        Value::Array(items) if items.is_empty() => "`[]`".into(),
        Value::Object(map) if map.is_empty() => "`{}`".into(),
        other => format!("`{other}`"),
    }
}

/// Text made fit for one table cell.
fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}
