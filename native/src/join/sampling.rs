//! The probability with which a span's trace was kept, from the `th` threshold its sampler wrote in
//! the `ot` entry of its W3C tracestate (OpenTelemetry's consistent probability sampling, OTEP 235),
//! read as `sloscope.processors.trace_sampling` reads it: the first `ot` member, in it the first
//! `th`, 1 to 14 hex digits as the top digits of a 56-bit rejection threshold `T`; the trace was
//! kept with probability `(2^56 - T) / 2^56`. Anything else says nothing.

const MAX_THRESHOLD: u64 = 1 << 56;

/// No threshold recorded: the span's probability is unknown.
pub const NO_THRESHOLD: u64 = u64::MAX;

/// The rejection threshold in `tracestate`, or `NO_THRESHOLD`.
pub fn threshold_of(tracestate: &str) -> u64 {
    for member in tracestate.split(',') {
        let member = member.trim_matches([' ', '\t']);
        let Some(value) = member.strip_prefix("ot=") else {
            continue;
        };
        for field in value.split(';') {
            if let Some(digits) = field.strip_prefix("th:") {
                let valid = (1..=14).contains(&digits.len())
                    && digits.bytes().all(|b| b.is_ascii_hexdigit());
                if !valid {
                    return NO_THRESHOLD;
                }
                let top = u64::from_str_radix(digits, 16).unwrap_or(0);
                return top << (4 * (14 - digits.len()));
            }
        }
        return NO_THRESHOLD;
    }
    NO_THRESHOLD
}

/// The probability a threshold keeps a trace with; None for `NO_THRESHOLD`.
pub fn probability(threshold: u64) -> Option<f64> {
    (threshold != NO_THRESHOLD).then(|| (MAX_THRESHOLD - threshold) as f64 / MAX_THRESHOLD as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_top_hex_digits_of_56_bits() {
        assert_eq!(threshold_of("ot=th:0"), 0);
        assert_eq!(threshold_of("ot=th:8"), 0x0080_0000_0000_0000);
        assert_eq!(
            threshold_of("a=b, ot=rv:0123456789abcd;th:C;x:y"),
            0x00c0_0000_0000_0000
        );
        assert_eq!(threshold_of("ot=th:ffffffffffffff"), MAX_THRESHOLD - 1);
        assert_eq!(probability(threshold_of("ot=th:e6666666666666")), Some(0.1));
        assert_eq!(probability(threshold_of("ot=th:8,ot=th:c")), Some(0.5));
    }

    #[test]
    fn a_malformed_or_missing_threshold_says_nothing() {
        for state in [
            "",
            "ot=rv:0123456789abcd",
            "ot=th:",
            "ot=th:123456789abcdef",
            "ot=th:8g",
            "ot=th:1_0",
            "ot=th:+8",
            "xot=th:8",
            "ot=p:3;th",
        ] {
            assert_eq!(threshold_of(state), NO_THRESHOLD, "{state}");
            assert_eq!(probability(threshold_of(state)), None, "{state}");
        }
    }
}
