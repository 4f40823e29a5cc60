//! The tools' JSON Schemas as agents and MCP clients read them: standard, compact, and typed so
//! that a client converting typed text (the MCP Inspector CLI's `--tool-arg k=v`) can send every
//! field.
//!
//! schemars writes schemas for Rust's reader: `format: "uint64"` and its kin (which validators
//! such as ajv do not know, and warn about on every field), optional fields as a union with
//! null (`["integer","null"]`, `anyOf [{"$ref"}, {"type":"null"}]`), which a client cannot map
//! to one type, and every doc comment as prose. This module rewrites them.
//!
//! Invariants (proved by `tests/it/mcp_stdio.rs`, `tests/it/mcp_python.rs`, `tests/mcp/inspector.sh`):
//! - only standard formats remain: a numeric format becomes the `minimum` (and, below 64 bits,
//!   the `maximum`) it means, unless the schema already bounds the value more tightly;
//! - an input schema has no `$ref` and no union with null: an optional field is its own type,
//!   left out of `required`, and leaving it out is how a client says "none" (the decoder still
//!   accepts `null`, so the schema accepts less than the decoder, never more); and no `type`
//!   array: a field of two types (a command as an argv list or one string, a reference as a
//!   handle or a number) is an `anyOf` of one type each, which clients that map schemas onto a
//!   single-`type` dialect can read (the Inspector CLI's `--strict` check);
//! - an output schema lists the result's top-level fields, each with its JSON types; it never
//!   types a field `null` and never has a `type` array (a result leaves out a field without a
//!   value: [`drop_nulls`], applied to every structured result), so `--strict` finds nothing in
//!   it either; and it is never narrower than schemars' schema: every result that validates
//!   there, nulls dropped, validates here (what the fields mean is the tool's description).

use serde_json::{Map, Value};

/// Formats the JSON Schema specification defines; any other is dropped.
const STANDARD_FORMATS: [&str; 19] = [
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The most nested `$ref`s an input schema may inline (the argument types are not recursive;
/// this only keeps a mistake from looping).
const INLINE_DEPTH_MAX: usize = 16;

/// An input schema: references inlined, unions with null replaced by their type, formats
/// replaced by ranges, `default: null` dropped.
pub fn input(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut root = schema.clone();
    let defs = root.remove("$defs").unwrap_or(Value::Null);
    root.remove("$schema");
    root.remove("title");
    let mut value = Value::Object(root);
    inline(&mut value, &defs, 0);
    walk(&mut value, &mut |node| {
        denull(node);
        split_types(node);
        standard_format(node);
        // The tool's table describes its arguments (`describe` in the parent module).
        for key in ["description", "title", "default", "examples"] {
            node.remove(key);
        }
    });
    into_object(value)
}

/// An output schema: the result's top-level fields, each with its JSON types (never `null`: a
/// result leaves such a field out); nested objects and arrays typed but not spelled out (the
/// tools' descriptions name their fields). Compact (an agent reads every schema of every tool each session) and true: whatever the
/// full schema accepts, once its nulls are dropped, this accepts.
pub fn output(schema: &Map<String, Value>) -> Map<String, Value> {
    let mut root = Value::Object(schema.clone());
    let defs = root.get("$defs").cloned().unwrap_or(Value::Null);
    inline(&mut root, &defs, 0);
    let root = into_object(root);
    let mut properties = Map::new();
    if let Some(Value::Object(fields)) = root.get("properties") {
        for (name, field) in fields {
            let leaf = leaf(field);
            properties.insert(name.clone(), Value::Object(leaf));
        }
    }
    let mut out = Map::new();
    out.insert("type".to_owned(), Value::from("object"));
    out.insert("properties".to_owned(), Value::Object(properties));
    out
}

/// A field's schema reduced to its JSON types, without `null` (a result leaves out a field
/// without a value: [`drop_nulls`]), each type its own `anyOf` branch when there are several (a
/// `type` array is what the Inspector CLI's `--strict` check flags). Listed values are left to
/// the descriptions and instructions: the states alone, spelled out in each of six tools, would
/// take the listing past its budget.
fn leaf(schema: &Value) -> Map<String, Value> {
    let mut types = Vec::new();
    collect(schema, &mut types, 0);
    types.retain(|t| *t != "null");
    // The JSON Schema order of types is irrelevant; a fixed one keeps listings stable.
    types.sort_unstable();
    types.dedup();
    let mut out = Map::new();
    match types.as_slice() {
        [] => {}
        [only] => {
            out.insert("type".to_owned(), Value::from(*only));
        }
        many => {
            let branches = many
                .iter()
                .map(|t| Value::Object(Map::from_iter([("type".to_owned(), Value::from(*t))])))
                .collect();
            out.insert("anyOf".to_owned(), Value::Array(branches));
        }
    }
    out
}

/// Removes every object member whose value is `null`, at every depth: a field without a value
/// is left out of a tool's result, so that its output schema can give each field one type.
pub fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(members) => {
            members.retain(|_, v| !v.is_null());
            members.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// The JSON types `schema` admits.
fn collect(schema: &Value, types: &mut Vec<&'static str>, depth: usize) {
    const NAMES: [&str; 7] = [
        "null", "boolean", "object", "array", "string", "number", "integer",
    ];
    let Value::Object(node) = schema else {
        // `true` or an unknown form: anything.
        types.extend(NAMES.iter().skip(1).copied());
        return;
    };
    let branches = ["anyOf", "oneOf"]
        .iter()
        .find_map(|k| node.get(*k).and_then(Value::as_array));
    if let Some(branches) = branches.filter(|_| depth < INLINE_DEPTH_MAX) {
        for branch in branches {
            collect(branch, types, depth + 1);
        }
        return;
    }
    let named = |t: &Value| {
        t.as_str()
            .and_then(|t| NAMES.iter().find(|n| **n == t).copied())
    };
    match node.get("type") {
        Some(Value::Array(list)) => types.extend(list.iter().filter_map(named)),
        Some(t) => types.extend(named(t)),
        None => types.extend(NAMES.iter().skip(1).copied()),
    }
}

fn into_object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Calls `visit` on every schema object in `value`, parents before children: the keywords whose
/// values are schemas, never property names or `enum` values.
fn walk(value: &mut Value, visit: &mut impl FnMut(&mut Map<String, Value>)) {
    let Value::Object(node) = value else { return };
    visit(node);
    for (key, child) in node.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" | "patternProperties" => {
                if let Value::Object(children) = child {
                    for schema in children.values_mut() {
                        walk(schema, visit);
                    }
                }
            }
            "anyOf" | "oneOf" | "allOf" | "prefixItems" => {
                if let Value::Array(children) = child {
                    for schema in children {
                        walk(schema, visit);
                    }
                }
            }
            "items"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains"
            | "propertyNames" => walk(child, visit),
            _ => {}
        }
    }
}

/// Replaces every local `$ref` with the definition it names, the referring node's own keywords
/// (its description) kept over the definition's.
fn inline(value: &mut Value, defs: &Value, depth: usize) {
    match value {
        Value::Object(node) => {
            if depth < INLINE_DEPTH_MAX
                && let Some(target) = node
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .and_then(|name| defs.get(name))
                    .and_then(Value::as_object)
            {
                node.remove("$ref");
                for (key, v) in target {
                    node.entry(key.clone()).or_insert_with(|| v.clone());
                }
                inline_children(node, defs, depth + 1);
            } else {
                inline_children(node, defs, depth);
            }
        }
        Value::Array(items) => {
            for item in items {
                inline(item, defs, depth);
            }
        }
        _ => {}
    }
}

fn inline_children(node: &mut Map<String, Value>, defs: &Value, depth: usize) {
    for child in node.values_mut() {
        inline(child, defs, depth);
    }
}

/// `type: [T, "null"]` becomes `type: T`; `anyOf`/`oneOf` of one schema and `{"type":"null"}`
/// becomes that schema (the node's own keywords kept).
fn denull(node: &mut Map<String, Value>) {
    if let Some(Value::Array(types)) = node.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            node.insert("type".to_owned(), only);
        }
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = node.get(key) else {
            continue;
        };
        let is_null = |b: &Value| {
            b.get("type").is_some_and(|t| t == "null")
                && b.as_object().is_some_and(|o| o.len() == 1)
        };
        if branches.len() != 2 || !branches.iter().any(is_null) {
            continue;
        }
        let Some(Value::Object(kept)) = branches.iter().find(|b| !is_null(b)).cloned() else {
            continue;
        };
        node.remove(key);
        for (k, v) in kept {
            node.entry(k).or_insert(v);
        }
        // The kept branch may itself have been a nullable type.
        denull(node);
    }
}

/// `type: [A, B]` becomes `anyOf: [{type: A}, {type: B}]`; the node's other keywords stay where
/// they are (each applies only to values of its own type: `items` to arrays, `minimum` to
/// numbers), so the schema accepts exactly what it did.
fn split_types(node: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = node.get("type") else {
        return;
    };
    if types.len() < 2 || node.contains_key("anyOf") {
        return;
    }
    let branches = types
        .iter()
        .map(|t| Value::Object(Map::from_iter([("type".to_owned(), t.clone())])))
        .collect();
    node.remove("type");
    node.insert("anyOf".to_owned(), Value::Array(branches));
}

/// Replaces a format JSON Schema does not define by the range it stands for.
fn standard_format(node: &mut Map<String, Value>) {
    let Some(format) = node.get("format").and_then(Value::as_str) else {
        return;
    };
    if STANDARD_FORMATS.contains(&format) {
        return;
    }
    let range: Option<(i64, Option<u64>)> = match format {
        "uint8" => Some((0, Some(u64::from(u8::MAX)))),
        "uint16" => Some((0, Some(u64::from(u16::MAX)))),
        "uint32" => Some((0, Some(u64::from(u32::MAX)))),
        "uint64" | "uint" | "uint128" => Some((0, None)),
        "int8" => Some((i64::from(i8::MIN), Some(i8::MAX as u64))),
        "int16" => Some((i64::from(i16::MIN), Some(i16::MAX as u64))),
        "int32" => Some((i64::from(i32::MIN), Some(i32::MAX as u64))),
        _ => None,
    };
    node.remove("format");
    if let Some((min, max)) = range {
        node.entry("minimum").or_insert_with(|| Value::from(min));
        if let Some(max) = max {
            node.entry("maximum").or_insert_with(|| Value::from(max));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> Map<String, Value> {
        into_object(value)
    }

    #[test]
    fn inputs_lose_null_unions_references_and_formats() {
        let schema = object(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "OutputArgs",
            "type": "object",
            "properties": {
                "max_bytes": {"type": ["integer", "null"], "format": "uint64",
                              "minimum": 1, "maximum": 1048576, "default": null},
                "rows": {"type": "integer", "format": "uint16", "minimum": 1},
                "rendering": {"description": "how", "anyOf": [
                    {"$ref": "#/$defs/Rendering"}, {"type": "null"}]},
                "pty": {"anyOf": [{"$ref": "#/$defs/Pty"}, {"type": "null"}]},
                "description": {"type": "string", "format": "uri"},
                "command": {"type": ["array", "string"], "items": {"type": "string"}},
            },
            "$defs": {
                "Rendering": {"type": "string", "enum": ["safe_text", "base64"]},
                "Pty": {"type": "object", "properties": {
                    "cols": {"type": "integer", "format": "uint16"}}},
            },
        }));
        let out = Value::Object(input(&schema));
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "max_bytes": {"type": "integer", "minimum": 1, "maximum": 1048576},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "rendering": {"type": "string", "enum": ["safe_text", "base64"]},
                    "pty": {"type": "object", "properties": {
                        "cols": {"type": "integer", "minimum": 0, "maximum": 65535}}},
                    "description": {"type": "string", "format": "uri"},
                    "command": {"anyOf": [{"type": "array"}, {"type": "string"}],
                                "items": {"type": "string"}},
                },
            })
        );
    }

    #[test]
    fn outputs_keep_their_fields_and_types_without_null_or_prose() {
        let schema = object(json!({
            "type": "object",
            "description": "one process",
            "properties": {
                "description": {"type": "string", "description": "a field named description"},
                "exit_code": {"type": ["integer", "null"], "format": "int32"},
                "state": {"$ref": "#/$defs/State"},
                "deadline": {"anyOf": [{"$ref": "#/$defs/Deadline"}, {"type": "null"}]},
                "ownership": {"oneOf": [
                    {"type": "object", "properties": {"a": {"const": "live"}}},
                    {"type": "object", "properties": {"a": {"const": "gone"}}}]},
                "exit": {"oneOf": [{"type": "object"}, {"const": "unknown", "type": "string"}]},
                "spans": {"type": "array", "items": {"$ref": "#/$defs/State"}},
            },
            "required": ["description", "exit_code", "state", "deadline", "ownership", "spans"],
            "$defs": {
                "State": {"description": "s", "type": "string", "enum": ["running", "exited"]},
                "Deadline": {"oneOf": [{"const": "wall", "type": "string"},
                                       {"const": "idle", "type": "string"}]},
            },
        }));
        let out = Value::Object(output(&schema));
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {
                    "description": {"type": "string"},
                    "exit_code": {"type": "integer"},
                    "state": {"type": "string"},
                    "deadline": {"type": "string"},
                    "ownership": {"type": "object"},
                    "exit": {"anyOf": [{"type": "object"}, {"type": "string"}]},
                    "spans": {"type": "array"},
                },
            })
        );
    }

    #[test]
    fn results_lose_their_nulls_at_every_depth() {
        let mut value = json!({"a": null, "b": {"c": null, "d": 1},
                               "e": [null, {"f": null, "g": [null]}]});
        drop_nulls(&mut value);
        assert_eq!(value, json!({"b": {"d": 1}, "e": [null, {"g": [null]}]}));
    }
}
