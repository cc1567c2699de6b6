//! What gRPC adds to HTTP/2 for a unary call (the gRPC "PROTOCOL-HTTP2" document): a 5-byte prefix
//! before each message, and the status in trailers, its message percent-encoded and its binary
//! metadata in base64.

/// The one method served.
pub const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

pub const OK: u32 = 0;
pub const INVALID_ARGUMENT: u32 = 3;
pub const RESOURCE_EXHAUSTED: u32 = 8;
pub const UNIMPLEMENTED: u32 = 12;
pub const INTERNAL: u32 = 13;
pub const UNAVAILABLE: u32 = 14;

/// The message of a unary request body: whether it is compressed, and its bytes. A unary call
/// carries exactly one message, so anything before or after it is an error.
pub fn message(body: &[u8]) -> Result<(bool, &[u8]), String> {
    let Some((prefix, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!(
            "a gRPC message has a 5-byte prefix; the request body has {} bytes",
            body.len()
        ));
    };
    let compressed = match prefix[0] {
        0 => false,
        1 => true,
        flag => return Err(format!("unknown gRPC compression flag {flag}")),
    };
    let length = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if length != rest.len() {
        return Err(format!(
            "the gRPC message says {length} bytes and the request body holds {} after its prefix",
            rest.len()
        ));
    }
    Ok((compressed, rest))
}

/// A compressed message inflated (`grpc-encoding` gzip or deflate, the zlib format), if it holds at
/// most `max` bytes; else `Err(Some(size))`, its inflated size, when that is at most `count_to`, or
/// `Err(None)`. Bytes that do not inflate are `Err` of the reason, as `Inflated::Corrupt`.
pub fn inflate(encoding: &str, compressed: &[u8], max: usize, count_to: usize) -> Inflated {
    use std::io::Read;
    let reader: Box<dyn Read + '_> = match encoding {
        "gzip" => Box::new(flate2::read::GzDecoder::new(compressed)),
        "deflate" => Box::new(flate2::read::ZlibDecoder::new(compressed)),
        other => return Inflated::Unknown(other.to_owned()),
    };
    let mut out = Vec::new();
    let mut reader = reader.take(count_to as u64 + 1);
    if let Err(error) = reader.by_ref().take(max as u64 + 1).read_to_end(&mut out) {
        return Inflated::Corrupt(format!("the {encoding} message does not inflate: {error}"));
    }
    if out.len() <= max {
        return Inflated::Message(out);
    }
    // Over the limit: count the rest (bounded) to say how large it is, without keeping it.
    match std::io::copy(&mut reader, &mut std::io::sink()) {
        Ok(rest) => {
            let size = out.len() + rest as usize;
            Inflated::TooLarge((size <= count_to).then_some(size))
        }
        Err(error) => {
            Inflated::Corrupt(format!("the {encoding} message does not inflate: {error}"))
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Inflated {
    Message(Vec<u8>),
    /// Over the limit: its size when counted to the end.
    TooLarge(Option<usize>),
    Corrupt(String),
    Unknown(String),
}

/// One uncompressed message with its prefix.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// `grpc-message`: bytes outside printable ASCII, and `%` itself, as `%XX` of the UTF-8 text.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// A `-bin` metadata value: standard base64 without padding, as gRPC sends it.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_read_from_its_prefix_and_nothing_else() {
        assert_eq!(message(&[0, 0, 0, 0, 2, 7, 8]), Ok((false, &[7u8, 8][..])));
        assert_eq!(message(&[1, 0, 0, 0, 0]), Ok((true, &[][..])));
        assert!(message(&[0, 0, 0]).unwrap_err().contains("3 bytes"));
        assert!(message(&[0, 0, 0, 0, 3, 1])
            .unwrap_err()
            .contains("says 3 bytes"));
        assert!(message(&[0, 0, 0, 0, 0, 1])
            .unwrap_err()
            .contains("holds 1"));
        assert!(message(&[2, 0, 0, 0, 0]).unwrap_err().contains("flag 2"));
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn a_compressed_message_inflates_within_its_limit_and_is_measured_beyond_it() {
        let plain = vec![7u8; 1000];
        assert_eq!(
            inflate("gzip", &gzip(&plain), 1000, 4000),
            Inflated::Message(plain.clone())
        );
        assert_eq!(
            inflate("gzip", &gzip(&plain), 999, 4000),
            Inflated::TooLarge(Some(1000))
        );
        assert_eq!(
            inflate("gzip", &gzip(&plain), 10, 500),
            Inflated::TooLarge(None)
        );
        assert!(
            matches!(inflate("gzip", b"not gzip", 10, 40), Inflated::Corrupt(r) if r.contains("gzip"))
        );
        assert_eq!(
            inflate("snappy", b"", 10, 40),
            Inflated::Unknown("snappy".into())
        );
    }

    #[test]
    fn a_frame_is_read_back_as_its_message() {
        let framed = frame(b"abc");
        assert_eq!(framed, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(message(&framed), Ok((false, &b"abc"[..])));
    }

    #[test]
    fn grpc_message_is_percent_encoded_beyond_printable_ascii() {
        assert_eq!(percent_encode("queue full, retry"), "queue full, retry");
        assert_eq!(percent_encode("100% é\n"), "100%25 %C3%A9%0A");
    }

    #[test]
    fn base64_without_padding_as_rfc_4648_less_its_pad() {
        // RFC 4648 section 10's vectors, padding removed.
        let cases = [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in cases {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
        assert_eq!(base64(&[0xff, 0xfe]), "//4");
    }
}
