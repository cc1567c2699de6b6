//! The joinable request id: what `join.request_id_pattern`'s group `id` extracts from a span's id.
//!
//! The default pattern, `^(?P<cmpl>cmpl-)?(?:chatcmpl-|embd-)?(?P<id>.+?)(?(cmpl)-\d+)$`, uses a
//! conditional group that no linear-time regex engine has, so it is matched here by hand, exactly
//! as Python's `re.match` backtracks through it, for ASCII ids (`\d` and `.` mean more outside
//! ASCII). Any other pattern, or a non-ASCII id, is left to Python's `re` by the caller.

/// The default `join.request_id_pattern` (config/join.py), which [`normalise`] implements.
pub const DEFAULT_PATTERN: &str = r"^(?P<cmpl>cmpl-)?(?:chatcmpl-|embd-)?(?P<id>.+?)(?(cmpl)-\d+)$";

/// The group `id` of the default pattern matched against an ASCII `raw`, or None when it does not
/// match (the caller then uses `raw` itself, as the Python assembler does).
pub fn normalise(raw: &str) -> Option<&str> {
    debug_assert!(raw.is_ascii());
    if let Some(rest) = raw.strip_prefix("cmpl-") {
        if let Some(id) = with_prefixes(rest, true) {
            return Some(id);
        }
    }
    with_prefixes(raw, false)
}

/// Tries the optional `chatcmpl-|embd-` prefix taken (in alternation order), then not taken.
fn with_prefixes(text: &str, cmpl: bool) -> Option<&str> {
    for prefix in ["chatcmpl-", "embd-"] {
        if let Some(rest) = text.strip_prefix(prefix) {
            if let Some(id) = lazy_id(rest, cmpl) {
                return Some(id);
            }
        }
    }
    lazy_id(text, cmpl)
}

/// `(?P<id>.+?)` followed by `-\d+$` (cmpl) or `$`: the shortest id, of at least one character and
/// no newline, after which the tail matches. `$` also matches before a final newline.
fn lazy_id(text: &str, cmpl: bool) -> Option<&str> {
    if cmpl {
        return lazy_id_by_backtracking(text, true);
    }
    // `$` right after the id: the whole text, or all but a final newline; the id holds none. (What
    // backtracking finds, in one pass: a test holds the two equal.)
    let bytes = text.as_bytes();
    match bytes.iter().position(|&b| b == b'\n') {
        None => (!bytes.is_empty()).then_some(text),
        Some(i) => (i > 0 && i + 1 == bytes.len()).then(|| &text[..i]),
    }
}

/// [`lazy_id`] as the pattern backtracks: every end of the id in turn, shortest first.
fn lazy_id_by_backtracking(text: &str, cmpl: bool) -> Option<&str> {
    let bytes = text.as_bytes();
    for end in 1..=bytes.len() {
        if bytes[end - 1] == b'\n' {
            return None; // `.` does not match a newline, and a longer id would hold it
        }
        let tail = &bytes[end..];
        let ok = if cmpl {
            digits_to_end(tail)
        } else {
            tail.is_empty() || tail == b"\n"
        };
        if ok {
            return Some(&text[..end]);
        }
    }
    None
}

/// `-\d+$`: a dash, one or more digits, then the end (or a final newline).
fn digits_to_end(tail: &[u8]) -> bool {
    let Some(rest) = tail.strip_prefix(b"-") else {
        return false;
    };
    let rest = rest.strip_suffix(b"\n").unwrap_or(rest);
    !rest.is_empty() && rest.iter().all(u8::is_ascii_digit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_prefixes_are_stripped() {
        assert_eq!(normalise("chatcmpl-abc-123"), Some("abc-123"));
        assert_eq!(normalise("cmpl-abc-0"), Some("abc"));
        assert_eq!(normalise("cmpl-abc-1-2"), Some("abc-1"));
        assert_eq!(normalise("embd-xyz"), Some("xyz"));
        assert_eq!(normalise("plain"), Some("plain"));
    }

    #[test]
    fn backtracking_cases_match_python() {
        // Values computed with Python's re.match on the default pattern.
        assert_eq!(normalise("cmpl-abc"), Some("cmpl-abc")); // no -<digits>: the cmpl branch fails
        assert_eq!(normalise("cmpl-chatcmpl--1"), Some("chatcmpl-"));
        assert_eq!(normalise("chatcmpl-"), Some("chatcmpl-"));
        assert_eq!(normalise("cmpl-chatcmpl-x-7"), Some("x"));
        assert_eq!(normalise("cmpl--1"), Some("cmpl--1"));
        assert_eq!(normalise("abc\n"), Some("abc"));
        assert_eq!(normalise("cmpl-abc-1\n"), Some("abc"));
        assert_eq!(normalise("a\nb"), None);
        assert_eq!(normalise("\n"), None);
        assert_eq!(normalise("cmpl-"), Some("cmpl-"));
    }

    #[test]
    fn the_plain_id_is_found_without_trying_every_end() {
        let alphabet = ["a", "-", "\n", "7"];
        let mut texts = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |c| format!("{t}{c}")))
                .collect();
            texts.extend(longer);
        }
        texts.sort();
        texts.dedup();
        assert!(texts.len() > 1000);
        for text in &texts {
            assert_eq!(
                lazy_id(text, false),
                lazy_id_by_backtracking(text, false),
                "{text:?}"
            );
        }
    }
}
