//! The messages of an export that sloscope does not read (events, links, instrumentation scopes,
//! entity refs, attributes it does not keep), checked as the protobuf runtime checks them while
//! parsing: a payload upb refuses must be refused here too, wherever in the tree the fault is.
//!
//! Only two kinds of known field can make a parse fail: a `string` that is not UTF-8, and a
//! message field whose body is itself invalid (or too deep). Scalars are consumed by the wire
//! reader whatever their values, so the tables list strings and messages only.
//!
//! Field numbers: opentelemetry-proto 1.45.2 (the Python package's descriptors,
//! opentelemetry/proto/{common,resource,trace}/v1/*_pb2.py; the same numbers as
//! opentelemetry-proto's common.proto, resource.proto and trace.proto at v1.9.0).

use super::wire::{utf8, Reader, Result, Value};

pub enum Kind {
    Str,
    Msg(&'static Schema),
}

pub struct Schema {
    pub fields: &'static [(u32, Kind)],
}

/// AnyValue: string_value = 1, array_value = 5, kvlist_value = 6 (common.proto).
pub static ANY_VALUE: Schema = Schema {
    fields: &[
        (1, Kind::Str),
        (5, Kind::Msg(&ARRAY_VALUE)),
        (6, Kind::Msg(&KEY_VALUE_LIST)),
    ],
};
/// ArrayValue: values = 1.
pub static ARRAY_VALUE: Schema = Schema {
    fields: &[(1, Kind::Msg(&ANY_VALUE))],
};
/// KeyValueList: values = 1.
pub static KEY_VALUE_LIST: Schema = Schema {
    fields: &[(1, Kind::Msg(&KEY_VALUE))],
};
/// KeyValue: key = 1, value = 2.
pub static KEY_VALUE: Schema = Schema {
    fields: &[(1, Kind::Str), (2, Kind::Msg(&ANY_VALUE))],
};
/// InstrumentationScope: name = 1, version = 2, attributes = 3.
pub static SCOPE: Schema = Schema {
    fields: &[(1, Kind::Str), (2, Kind::Str), (3, Kind::Msg(&KEY_VALUE))],
};
/// EntityRef: schema_url = 1, type = 2, id_keys = 3, description_keys = 4 (repeated strings).
pub static ENTITY_REF: Schema = Schema {
    fields: &[
        (1, Kind::Str),
        (2, Kind::Str),
        (3, Kind::Str),
        (4, Kind::Str),
    ],
};
/// Span.Event: name = 2, attributes = 3.
pub static EVENT: Schema = Schema {
    fields: &[(2, Kind::Str), (3, Kind::Msg(&KEY_VALUE))],
};
/// Span.Link: trace_state = 3, attributes = 4.
pub static LINK: Schema = Schema {
    fields: &[(3, Kind::Str), (4, Kind::Msg(&KEY_VALUE))],
};

/// Checks the body of a message of type `schema` read from `parent`, one level below it.
pub fn validate(parent: &Reader<'_>, body: &[u8], schema: &Schema) -> Result<()> {
    let mut reader = parent.sub(body)?;
    while let Some((number, value)) = reader.next()? {
        let Value::Len(inner) = value else { continue };
        match schema.fields.iter().find(|(n, _)| *n == number) {
            Some((_, Kind::Str)) => {
                utf8(inner)?;
            }
            Some((_, Kind::Msg(child))) => validate(&reader, inner, child)?,
            None => {}
        }
    }
    Ok(())
}
