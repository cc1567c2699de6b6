//! A reader of the protobuf wire format, just what OTLP needs: varints, fixed 32/64-bit values,
//! length-delimited fields, and unknown fields skipped (groups included) as upb skips them.
//!
//! The rules are upb's (the runtime behind the Python reference decoder, protobuf 7.36.2), checked
//! against it by tests/unit/receivers/test_native_decode.py: a varint has at most 10 bytes and keeps its low
//! 64 bits; a tag has at most 5 bytes, fits in 32 bits and names a field other than 0; wire types
//! 6 and 7 are corrupt; an end-group tag must close the group it is in; a length must fit in what
//! is left. A known field given another wire type than its own is an unknown field, not an error
//! (`_upb_Decoder_GetVarintOp` and its siblings map such a pairing to `kUpb_DecodeOp_UnknownField`,
//! upb/wire/decode.c:764-789 at protobuf e712d276; field number 0 is malformed, :1014; each
//! sub-message or group takes one level of the depth budget, :196): callers simply ignore values
//! they do not expect.

/// Why a payload is not a valid protobuf message; the text goes to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(pub String);

pub type Result<T> = std::result::Result<T, WireError>;

/// How deep messages (and groups) may nest: upb's `kUpb_WireFormat_DefaultDepthLimit` (100,
/// upb/wire/internal/constants.h:11 at protobuf 354069cc and e712d276). The top-level message is depth 0, and a
/// message at depth 101 is refused.
pub const DEPTH_LIMIT: u32 = 100;

/// One field's value as the wire carries it (a group has already been skipped).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
    Group,
}

/// Reads the fields of one message body.
///
/// The reader is on the hot path of every decode (a few dozen fields per span): the common cases
/// (one-byte tags, one- or two-byte varints) are inlined into the callers' loops, and every error
/// is built out of line, so that a field comes back in registers.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// The address of the whole payload and its length: an error locates its fault by the
    /// distance of this body from there (a safe address subtraction, never dereferenced).
    origin: usize,
    total: usize,
    depth: u32,
}

impl<'a> Reader<'a> {
    /// The fields of the top-level message.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            origin: buf.as_ptr() as usize,
            total: buf.len(),
            depth: 0,
        }
    }

    /// The fields of a sub-message read as `value` of this message (one level deeper).
    #[inline(always)]
    pub fn sub(&self, body: &'a [u8]) -> Result<Reader<'a>> {
        let depth = self.depth + 1;
        if depth > DEPTH_LIMIT {
            return Err(self.too_deep("messages"));
        }
        Ok(Reader {
            buf: body,
            pos: 0,
            origin: self.origin,
            total: self.total,
            depth,
        })
    }

    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether every field of the message has been read.
    #[inline(always)]
    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    /// Where the reader is in the whole payload (0 for a body that is not a slice of it).
    fn at(&self) -> usize {
        let base = (self.buf.as_ptr() as usize).wrapping_sub(self.origin);
        if base
            .checked_add(self.buf.len())
            .is_some_and(|end| end <= self.total)
        {
            base + self.pos
        } else {
            self.pos
        }
    }

    #[cold]
    #[inline(never)]
    fn error(&self, what: String) -> WireError {
        WireError(format!("{what} at byte {}", self.at()))
    }

    #[cold]
    #[inline(never)]
    fn truncated(&self, what: &str) -> WireError {
        self.error(format!("truncated {what}"))
    }

    #[cold]
    #[inline(never)]
    fn too_deep(&self, what: &str) -> WireError {
        self.error(format!("{what} nested more than {DEPTH_LIMIT} levels deep"))
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<u64> {
        let rest = &self.buf[self.pos..];
        if let Some(&byte) = rest.first() {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
            if let Some(&next) = rest.get(1) {
                if next < 0x80 {
                    self.pos += 2;
                    return Ok(u64::from(byte & 0x7f) | u64::from(next) << 7);
                }
            }
        }
        self.varint_slow()
    }

    #[inline(never)]
    fn varint_slow(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(self.truncated("varint"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error("varint longer than 10 bytes".into()))
    }

    #[inline(always)]
    fn fixed<const N: usize>(&mut self) -> Result<[u8; N]> {
        match self.buf.get(self.pos..self.pos + N) {
            Some(bytes) => {
                self.pos += N;
                Ok(bytes.try_into().unwrap_or([0; N]))
            }
            None => Err(self.truncated(if N == 8 { "fixed64" } else { "fixed32" })),
        }
    }

    /// (field number, wire type) of the next tag.
    #[inline(always)]
    fn tag(&mut self) -> Result<(u32, u8)> {
        if let Some(&byte) = self.buf.get(self.pos) {
            if (0x08..0x80).contains(&byte) {
                self.pos += 1;
                return Ok((u32::from(byte >> 3), byte & 7));
            }
        }
        self.tag_slow()
    }

    #[inline(never)]
    fn tag_slow(&mut self) -> Result<(u32, u8)> {
        let start = self.pos;
        let mut value = 0u64;
        for i in 0..5 {
            let Some(&byte) = self.buf.get(self.pos) else {
                return Err(self.truncated("tag"));
            };
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                if value > u64::from(u32::MAX) {
                    break;
                }
                let (field, wire) = ((value >> 3) as u32, (value & 7) as u8);
                if field == 0 {
                    self.pos = start;
                    return Err(self.error("field number 0".into()));
                }
                return Ok((field, wire));
            }
        }
        self.pos = start;
        Err(self.error("tag out of range".into()))
    }

    #[inline(always)]
    fn len(&mut self) -> Result<&'a [u8]> {
        let size = self.varint()?;
        if size > i32::MAX as u64 || size as usize > self.buf.len() - self.pos {
            return Err(self.truncated("length-delimited field"));
        }
        let body = &self.buf[self.pos..self.pos + size as usize];
        self.pos += size as usize;
        Ok(body)
    }

    /// Skips a group whose start tag (field `field`) was just read, at one level deeper.
    fn skip_group(&mut self, field: u32, depth: u32) -> Result<()> {
        if depth > DEPTH_LIMIT {
            return Err(self.too_deep("groups"));
        }
        loop {
            if self.pos == self.buf.len() {
                return Err(self.truncated("group"));
            }
            let (number, wire) = self.tag()?;
            match wire {
                4 if number == field => return Ok(()),
                4 => return Err(self.error("end-group tag of another group".into())),
                3 => self.skip_group(number, depth + 1)?,
                _ => {
                    self.value(wire)?;
                }
            }
        }
    }

    #[inline(always)]
    fn value(&mut self, wire: u8) -> Result<Value<'a>> {
        Ok(match wire {
            0 => Value::Varint(self.varint()?),
            1 => Value::Fixed64(u64::from_le_bytes(self.fixed::<8>()?)),
            2 => Value::Len(self.len()?),
            5 => Value::Fixed32(u32::from_le_bytes(self.fixed::<4>()?)),
            _ => return Err(self.invalid_wire(wire)),
        })
    }

    #[cold]
    #[inline(never)]
    fn invalid_wire(&self, wire: u8) -> WireError {
        self.error(format!("invalid wire type {wire}"))
    }

    /// A group (wire type 3: skipped whole) or a stray end-group tag (4: an error).
    #[cold]
    #[inline(never)]
    fn group(&mut self, start: usize, field: u32, wire: u8) -> Result<Option<(u32, Value<'a>)>> {
        if wire == 3 {
            self.skip_group(field, self.depth + 1)?;
            return Ok(Some((field, Value::Group)));
        }
        self.pos = start;
        Err(self.error("end-group tag outside a group".into()))
    }

    /// The next field of the message, or None at its end.
    #[inline(always)]
    #[allow(clippy::should_implement_trait)] // fallible: an Iterator of Results reads worse here
    pub fn next(&mut self) -> Result<Option<(u32, Value<'a>)>> {
        if self.pos == self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let (field, wire) = self.tag()?;
        if wire == 3 || wire == 4 {
            return self.group(start, field, wire);
        }
        Ok(Some((field, self.value(wire)?)))
    }
}

/// A string field's text: upb refuses a proto3 `string` that is not UTF-8.
#[inline]
pub fn utf8(bytes: &[u8]) -> Result<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8. OTLP strings (span names, ids, model names, header values)
        // are nearly always ASCII, and the word-at-a-time ASCII check costs a fraction of
        // `from_utf8`'s general validation on such short strings: measured with callgrind on
        // bench/payloads.py `build` payloads, 6,490 -> 6,110 instructions per span.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|e| not_utf8(e.valid_up_to(), bytes.len()))
}

#[cold]
#[inline(never)]
fn not_utf8(valid: usize, len: usize) -> WireError {
    WireError(format!(
        "string field is not valid UTF-8 (byte {valid} of {len})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(buf: &[u8]) -> Result<Vec<(u32, Value<'_>)>> {
        let mut reader = Reader::new(buf);
        let mut out = Vec::new();
        while let Some(field) = reader.next()? {
            out.push(field);
        }
        Ok(out)
    }

    #[test]
    fn reads_each_wire_type() {
        let buf = [
            0x08, 0x96, 0x01, // 1: varint 150
            0x11, 1, 0, 0, 0, 0, 0, 0, 0, // 2: fixed64 1
            0x1a, 2, b'h', b'i', // 3: "hi"
            0x25, 2, 0, 0, 0, // 4: fixed32 2
            0x2b, 0x08, 0x01, 0x2c, // 5: a group holding a varint
        ];
        assert_eq!(
            fields(&buf).unwrap(),
            vec![
                (1, Value::Varint(150)),
                (2, Value::Fixed64(1)),
                (3, Value::Len(b"hi")),
                (4, Value::Fixed32(2)),
                (5, Value::Group),
            ]
        );
    }

    #[test]
    fn a_varint_keeps_its_low_64_bits_and_has_at_most_10_bytes() {
        let mut ten = vec![0x08];
        ten.extend([0xff; 9]);
        ten.push(0x7f);
        assert_eq!(fields(&ten).unwrap(), vec![(1, Value::Varint(u64::MAX))]);
        let mut eleven = vec![0x08];
        eleven.extend([0xff; 10]);
        eleven.push(0x01);
        assert!(fields(&eleven)
            .unwrap_err()
            .0
            .contains("longer than 10 bytes"));
    }

    #[test]
    fn tags_are_checked_as_upb_checks_them() {
        assert!(fields(&[0x00, 0x01])
            .unwrap_err()
            .0
            .contains("field number 0"));
        assert!(fields(&[0x0e])
            .unwrap_err()
            .0
            .contains("invalid wire type 6"));
        assert!(fields(&[0x0f])
            .unwrap_err()
            .0
            .contains("invalid wire type 7"));
        // a five-byte tag that fits in 32 bits is fine; one that does not, or a sixth byte, is not
        assert_eq!(
            fields(&[0x88, 0x80, 0x80, 0x80, 0x00, 0x01]).unwrap(),
            vec![(1, Value::Varint(1))]
        );
        assert!(fields(&[0x88, 0x80, 0x80, 0x80, 0x10, 0x01]).is_err());
        assert!(fields(&[0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01]).is_err());
    }

    #[test]
    fn truncations_and_stray_group_ends_are_errors() {
        assert!(fields(&[0x08])
            .unwrap_err()
            .0
            .starts_with("truncated varint"));
        assert!(fields(&[0x08, 0x80])
            .unwrap_err()
            .0
            .starts_with("truncated varint"));
        assert!(fields(&[0x11, 0, 0])
            .unwrap_err()
            .0
            .starts_with("truncated fixed64"));
        assert!(fields(&[0x0a, 3, b'a'])
            .unwrap_err()
            .0
            .starts_with("truncated length"));
        assert!(fields(&[0x2b, 0x08, 0x01])
            .unwrap_err()
            .0
            .starts_with("truncated group"));
        assert!(fields(&[0x2c]).unwrap_err().0.contains("outside a group"));
        assert!(fields(&[0x2b, 0x34])
            .unwrap_err()
            .0
            .contains("another group"));
        assert_eq!(
            fields(&[0x0a, 3, b'a', b'b']).unwrap_err().0,
            "truncated length-delimited field at byte 2"
        );
    }

    #[test]
    fn nesting_stops_at_the_depth_limit() {
        // 100 nested groups are read, 101 are not (upb: the same).
        let nested = |n: usize| [vec![0x2b; n], vec![0x2c; n]].concat();
        assert!(fields(&nested(100)).is_ok());
        assert!(fields(&nested(101))
            .unwrap_err()
            .0
            .contains("nested more than 100"));
        let mut reader = Reader::new(b"\x0a\x00");
        let mut level = Reader::new(b"");
        for _ in 0..DEPTH_LIMIT {
            level = level.sub(b"").unwrap_or_else(|_| unreachable!());
        }
        assert_eq!(level.depth(), DEPTH_LIMIT);
        assert!(level.sub(b"").is_err());
        assert!(reader.next().is_ok());
    }

    #[test]
    fn utf8_is_strict() {
        assert_eq!(utf8(b"ok").unwrap(), "ok");
        assert!(utf8(b"\xff").is_err());
        assert!(utf8(b"\xed\xa0\x80").is_err()); // a surrogate
        assert!(utf8(b"\xc0\x80").is_err()); // overlong
    }
}
