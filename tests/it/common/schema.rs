//! A validator of the JSON Schema keywords schemars writes (`type`, `const`, `enum`, `oneOf`,
//! `anyOf`, `allOf`, `properties`, `required`, `additionalProperties`, `items`, local `$ref`),
//! for the tools' input and output schemas. Keywords it does not know (numeric bounds, `format`)
//! are not checked.

use serde_json::Value;

fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let path = reference.strip_prefix('#').expect("a local $ref");
            let target = root
                .pointer(path)
                .unwrap_or_else(|| panic!("$ref {reference} not found"));
            resolve(root, target)
        }
        None => schema,
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        other => panic!("unknown type {other}"),
    }
}

/// Every way `value` fails `schema`, with its JSON pointer.
pub fn violations(root: &Value, schema: &Value, value: &Value, at: &str, out: &mut Vec<String>) {
    let schema = resolve(root, schema);
    match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            out.push(format!("{at}: {value} where the schema allows nothing"));
            return;
        }
        _ => {}
    }
    if let Some(types) = schema.get("type") {
        let ok = match types {
            Value::String(t) => type_matches(t, value),
            Value::Array(ts) => ts
                .iter()
                .filter_map(Value::as_str)
                .any(|t| type_matches(t, value)),
            _ => true,
        };
        if !ok {
            out.push(format!("{at}: {value} is not of type {types}"));
            return;
        }
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        out.push(format!("{at}: {value} is not {c}"));
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        out.push(format!("{at}: {value} is not one of {options:?}"));
    }
    for (keyword, exactly_one) in [("oneOf", true), ("anyOf", false)] {
        if let Some(Value::Array(options)) = schema.get(keyword) {
            let matching = options
                .iter()
                .filter(|option| {
                    let mut inner = Vec::new();
                    violations(root, option, value, at, &mut inner);
                    inner.is_empty()
                })
                .count();
            if matching == 0 || (exactly_one && matching > 1) {
                out.push(format!(
                    "{at}: {value} matches {matching} of the {keyword} options"
                ));
            }
        }
    }
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for option in all {
            violations(root, option, value, at, out);
        }
    }
    if let Value::Object(object) = value {
        let properties = schema.get("properties").and_then(Value::as_object);
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !object.contains_key(name) {
                    out.push(format!("{at}: required property {name} is missing"));
                }
            }
        }
        for (name, field) in object {
            let path = format!("{at}/{name}");
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => violations(root, sub, field, &path, out),
                None => match schema.get("additionalProperties") {
                    Some(Value::Bool(false)) => {
                        out.push(format!("{path}: not a property the schema names"));
                    }
                    Some(sub @ Value::Object(_)) => violations(root, sub, field, &path, out),
                    _ => {}
                },
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, schema.get("items")) {
        for (k, item) in items.iter().enumerate() {
            violations(root, item_schema, item, &format!("{at}/{k}"), out);
        }
    }
}
