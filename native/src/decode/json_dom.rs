//! A strict JSON reader for OTLP/JSON bodies that keeps what `json.loads` would lose sight of:
//! object keys in order, duplicates included, and numbers as their text.
//!
//! It never refuses a body itself. Anything it is not sure `json.loads` reads the same way (a
//! syntax error, a byte-order mark, a lone surrogate escape, a number of thousands of digits,
//! nesting deeper than [`DEPTH`]) is [`Unsure`]: the caller then leaves the body to the Python
//! reference, which gives the reference's own answer, refusal message included.

use std::borrow::Cow;

/// This body is for the reference decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsure;

pub type Sure<T> = std::result::Result<T, Unsure>;

/// Deeper documents go to the reference (which reads up to Python's recursion limit).
pub const DEPTH: usize = 200;
/// Longer number tokens go to the reference (Python refuses integers of more than 4300 digits).
const NUMBER_CHARS: usize = 1000;

#[derive(Debug, Clone, PartialEq)]
pub enum J<'a> {
    Null,
    Bool(bool),
    /// A number's text, as the JSON grammar (RFC 8259 section 6) has it.
    Num(&'a str),
    Str(Cow<'a, str>),
    Arr(Vec<J<'a>>),
    Obj(Vec<(Cow<'a, str>, J<'a>)>),
}

pub fn parse(body: &[u8]) -> Sure<J<'_>> {
    let text = std::str::from_utf8(body).map_err(|_| Unsure)?;
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        pos: 0,
    };
    parser.space();
    let value = parser.value(0)?;
    parser.space();
    if parser.pos != parser.bytes.len() {
        return Err(Unsure);
    }
    Ok(value)
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn space(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn eat(&mut self, literal: &str) -> Sure<()> {
        if self.bytes[self.pos..].starts_with(literal.as_bytes()) {
            self.pos += literal.len();
            Ok(())
        } else {
            Err(Unsure)
        }
    }

    fn value(&mut self, depth: usize) -> Sure<J<'a>> {
        if depth > DEPTH {
            return Err(Unsure);
        }
        match self.peek().ok_or(Unsure)? {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => Ok(J::Str(self.string()?)),
            b't' => self.eat("true").map(|()| J::Bool(true)),
            b'f' => self.eat("false").map(|()| J::Bool(false)),
            b'n' => self.eat("null").map(|()| J::Null),
            _ => self.number(),
        }
    }

    fn object(&mut self, depth: usize) -> Sure<J<'a>> {
        self.pos += 1;
        let mut pairs = Vec::new();
        self.space();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(J::Obj(pairs));
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return Err(Unsure);
            }
            let key = self.string()?;
            self.space();
            self.eat(":")?;
            self.space();
            let value = self.value(depth + 1)?;
            pairs.push((key, value));
            self.space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(J::Obj(pairs));
                }
                _ => return Err(Unsure),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Sure<J<'a>> {
        self.pos += 1;
        let mut items = Vec::new();
        self.space();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(J::Arr(items));
        }
        loop {
            self.space();
            items.push(self.value(depth + 1)?);
            self.space();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(J::Arr(items));
                }
                _ => return Err(Unsure),
            }
        }
    }

    fn number(&mut self) -> Sure<J<'a>> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(Unsure),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(Unsure);
            }
            self.digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(Unsure);
            }
            self.digits();
        }
        if self.pos - start > NUMBER_CHARS {
            return Err(Unsure);
        }
        Ok(J::Num(&self.text[start..self.pos]))
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn hex4(&mut self) -> Sure<u32> {
        let digits = self.text.get(self.pos..self.pos + 4).ok_or(Unsure)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Unsure);
        }
        self.pos += 4;
        u32::from_str_radix(digits, 16).map_err(|_| Unsure)
    }

    fn string(&mut self) -> Sure<Cow<'a, str>> {
        self.pos += 1; // the opening quote
        let start = self.pos;
        // The plain run, borrowed; escapes switch to an owned copy.
        loop {
            match self.peek().ok_or(Unsure)? {
                b'"' => {
                    let text = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(text));
                }
                b'\\' => break,
                0..=0x1f => return Err(Unsure), // json.loads (strict) refuses control characters
                _ => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            match self.peek().ok_or(Unsure)? {
                b'"' => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                b'\\' => {
                    self.pos += 1;
                    let escape = self.peek().ok_or(Unsure)?;
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let code = match unit {
                                0xd800..=0xdbff => {
                                    // A high surrogate must be followed by an escaped low one;
                                    // a lone surrogate is what the reference refuses its own way.
                                    self.eat("\\u")?;
                                    let low = self.hex4()?;
                                    if !(0xdc00..=0xdfff).contains(&low) {
                                        return Err(Unsure);
                                    }
                                    0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
                                }
                                0xdc00..=0xdfff => return Err(Unsure),
                                _ => unit,
                            };
                            out.push(char::from_u32(code).ok_or(Unsure)?);
                        }
                        _ => return Err(Unsure),
                    }
                }
                0..=0x1f => return Err(Unsure),
                _ => {
                    // Copy the next character whole (the text is UTF-8).
                    let ch = self.text[self.pos..].chars().next().ok_or(Unsure)?;
                    out.push(ch);
                    self.pos += ch.len_utf8();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_json_keeping_order_duplicates_and_number_text() {
        let doc = parse(br#" {"b": [1, -0.5e3, "x\u00e9\ud83d\ude00\n"], "a": null, "b": true} "#)
            .unwrap();
        let J::Obj(pairs) = doc else { panic!() };
        assert_eq!(pairs.len(), 3);
        assert_eq!(pairs[0].0, "b");
        assert_eq!(
            pairs[0].1,
            J::Arr(vec![J::Num("1"), J::Num("-0.5e3"), J::Str("xé😀\n".into())])
        );
        assert_eq!(pairs[2], ("b".into(), J::Bool(true)));
    }

    #[test]
    fn leaves_doubtful_bodies_to_the_reference() {
        for body in [
            &b"{"[..],
            b"NaN",
            b"[Infinity]",
            b"01",
            b"1.",
            br#""\ud800""#,
            br#""\udc00x""#,
            b"\xef\xbb\xbf{}",
            b"\"\x01\"",
            b"{} x",
            b"[1,]",
        ] {
            assert_eq!(
                parse(body),
                Err(Unsure),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(parse(&[b'['; DEPTH + 2]), Err(Unsure));
        let long = format!("[{}]", "9".repeat(NUMBER_CHARS + 1));
        assert_eq!(parse(long.as_bytes()), Err(Unsure));
    }
}
