//! Schema helpers: fields whose Rust type has no `JsonSchema` of its own, and
//! keeping the generated schema to what the apiserver understands.

use schemars::transform::{RecursiveTransform, Transform};
use schemars::{Schema, SchemaGenerator, json_schema};

/// An RFC 3339 timestamp (`chrono::DateTime<Utc>` on the Rust side).
pub(crate) fn date_time(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "format": "date-time",
    })
}

/// Drops integer formats the apiserver does not know (`uint32`, `uint64`,
/// ...), which it answers with an "unrecognized format" warning on every
/// apply of the CRD. The `minimum: 0` schemars adds for unsigned types stays.
pub(crate) fn k8s_formats(schema: &mut Schema) {
    RecursiveTransform(|schema: &mut Schema| {
        let unknown = schema
            .get("format")
            .and_then(|format| format.as_str())
            .is_some_and(|format| format.starts_with("uint"));
        if unknown {
            schema.remove("format");
        }
    })
    .transform(schema);
}
