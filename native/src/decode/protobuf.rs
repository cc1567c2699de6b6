//! `ExportTraceServiceRequest` protobuf bytes to spans, as `decode_protobuf` and then
//! `Intake.submit`'s `Mapping.check` make them (exporter/sloscope/receivers/otlp_decode.py,
//! receivers/intake.py): resource → scope → span flattened in wire order, invalid ids rejected
//! one by one, the kept span attributes' types checked.
//!
//! Field numbers: opentelemetry-proto 1.45.2 (opentelemetry/proto/collector/trace/v1/
//! trace_service_pb2.py, trace/v1/trace_pb2.py, resource/v1/resource_pb2.py descriptors):
//! ExportTraceServiceRequest.resource_spans = 1; ResourceSpans: resource = 1, scope_spans = 2,
//! schema_url = 3; Resource: attributes = 1, entity_refs = 3; ScopeSpans: scope = 1, spans = 2,
//! schema_url = 3; Span: trace_id = 1, span_id = 2, trace_state = 3, parent_span_id = 4,
//! name = 5, start_time_unix_nano = 7 (fixed64), end_time_unix_nano = 8 (fixed64),
//! attributes = 9, events = 11, links = 13, status = 15; Status: message = 2, code = 3.

use std::sync::Arc;

use super::rules::Rules;
use super::schema::{validate, ENTITY_REF, EVENT, LINK, SCOPE};
use super::values::{dedupe, Ctx, Keys, Seen};
use super::wire::{utf8, Reader, Result, Value as Wire};
use super::{Decoded, Read};
use crate::span::{KeyTable, Resource};

pub fn decode(payload: &[u8], rules: &Rules) -> Result<Decoded> {
    let mut ctx = Ctx {
        keys: Keys::default(),
        rules,
        scratch: Vec::new(),
        typed: Vec::new(),
    };
    let mut out = Decoded::default();
    let mut reader = Reader::new(payload);
    while let Some((number, value)) = reader.next()? {
        if let (1, Wire::Len(body)) = (number, value) {
            resource_spans(&reader, body, &mut ctx, &mut out)?;
        }
    }
    out.keys = KeyTable::from(ctx.keys.into_keys());
    Ok(out)
}

fn resource_spans<'p>(
    parent: &Reader<'p>,
    body: &'p [u8],
    ctx: &mut Ctx<'p, '_>,
    out: &mut Decoded,
) -> Result<()> {
    let mut reader = parent.sub(body)?;
    // The resource is read whole before any span (a second `resource` field merges into the
    // first, wherever it is), as the Python decoder reads the parsed message.
    let mut resources = Vec::new();
    let mut scopes = Vec::new();
    while let Some((number, value)) = reader.next()? {
        match (number, value) {
            (1, Wire::Len(b)) => resources.push(b),
            (2, Wire::Len(b)) => scopes.push(b),
            (3, Wire::Len(b)) => {
                utf8(b)?;
            }
            _ => {}
        }
    }
    let mut attributes = Vec::new();
    for b in resources {
        let mut resource = reader.sub(b)?;
        while let Some((number, value)) = resource.next()? {
            match (number, value) {
                (1, Wire::Len(kv)) => {
                    ctx.key_value(&resource, kv, true, &mut attributes)?;
                }
                (3, Wire::Len(e)) => validate(&resource, e, &ENTITY_REF)?,
                _ => {}
            }
        }
    }
    let resource = Arc::new(Resource {
        attributes: dedupe(attributes),
    });
    for b in scopes {
        let mut scope = reader.sub(b)?;
        while let Some((number, value)) = scope.next()? {
            match (number, value) {
                (1, Wire::Len(s)) => validate(&scope, s, &SCOPE)?,
                (2, Wire::Len(s)) => span(&scope, s, &resource, ctx, out)?,
                (3, Wire::Len(s)) => {
                    utf8(s)?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn span<'p>(
    parent: &Reader<'p>,
    body: &'p [u8],
    resource: &Arc<Resource>,
    ctx: &mut Ctx<'p, '_>,
    out: &mut Decoded,
) -> Result<()> {
    let mut reader = parent.sub(body)?;
    let (mut trace_id, mut span_id, mut parent_id): (&[u8], &[u8], &[u8]) = (b"", b"", b"");
    let (mut name, mut trace_state, mut status_message) = ("", "", "");
    let (mut start_ns, mut end_ns, mut status_code) = (0u64, 0u64, 0i32);
    let mut attributes = std::mem::take(&mut ctx.scratch);
    let mut typed = std::mem::take(&mut ctx.typed);
    attributes.clear();
    typed.clear();
    let mut seen = Seen::default();
    let mut all_typed_right = true;
    while let Some((number, value)) = reader.next()? {
        match (number, value) {
            (1, Wire::Len(b)) => trace_id = b,
            (2, Wire::Len(b)) => span_id = b,
            (3, Wire::Len(b)) => trace_state = utf8(b)?,
            (4, Wire::Len(b)) => parent_id = b,
            (5, Wire::Len(b)) => name = utf8(b)?,
            (7, Wire::Fixed64(v)) => start_ns = v,
            (8, Wire::Fixed64(v)) => end_ns = v,
            (9, Wire::Len(b)) => {
                if let Some(id) = ctx.span_attribute(&reader, b, &mut attributes)? {
                    seen.add(id);
                    if let Some(rule) = ctx.keys.info(id).rule {
                        typed.push((id, rule));
                        if let Some((_, value)) = attributes.last() {
                            all_typed_right &=
                                ctx.rules.list[rule as usize].expected.accepts_in(value);
                        }
                    }
                }
            }
            (11, Wire::Len(b)) => validate(&reader, b, &EVENT)?,
            (13, Wire::Len(b)) => validate(&reader, b, &LINK)?,
            (15, Wire::Len(b)) => {
                // Status: message = 2, code = 3 (an open enum: any int32, the varint's low 32 bits)
                let mut status = reader.sub(b)?;
                while let Some((number, value)) = status.next()? {
                    match (number, value) {
                        (2, Wire::Len(m)) => status_message = utf8(m)?,
                        (3, Wire::Varint(c)) => status_code = c as u32 as i32,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let read = Read {
        trace_id,
        span_id,
        parent_id,
        name,
        trace_state,
        start_ns,
        end_ns,
        status_code,
        status_message,
    };
    // With distinct keys each typed value was checked as it came; only a span with a wrong one,
    // or with a repeated key (whose last value counts), needs `first_wrong`'s scan.
    let check: &[(u32, u32)] = if seen.maybe_repeated || !all_typed_right {
        &typed
    } else {
        &[]
    };
    let repeated = seen.maybe_repeated;
    let key_of = |id: u32| ctx.keys.info(id).key.clone();
    out.add_input(
        ctx.rules,
        read,
        &mut attributes,
        repeated,
        resource,
        check,
        key_of,
    );
    // The buffer (and its capacity) is reused for the next span.
    ctx.scratch = attributes;
    ctx.typed = typed;
    Ok(())
}
