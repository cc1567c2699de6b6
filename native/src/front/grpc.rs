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
