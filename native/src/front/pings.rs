//! Clients' pings policed as gRPC core polices them: grpc/grpc
//! src/core/ext/transport/chttp2/transport/ping_abuse_policy.cc at 3e80231b57e80b611f190ad67ba5eb99c023b473
//! (`ReceivedOnePing`, `ResetPingStrikes`, `max_ping_strikes` 2), with the server's `transport_idle`
//! of frame_ping.cc (`keepalive_permit_without_calls == 0 && stream_map.empty()`). A ping sooner
//! than `min_ping_interval_seconds` after the previous one is a strike, and so is one sooner than two
//! hours while no call is open unless `permit_keepalive_without_calls`; the third strike closes the
//! connection. gRPC core then sends `GOAWAY` `ENHANCE_YOUR_CALM` (`too_many_pings`) first; hyper
//! owns the connection's writes, so here it is closed without one. Strikes and the ping clock are
//! reset when a call ends (gRPC core: when the server sends headers or data).
//!
//! hyper answers pings itself and tells nobody, so they are read off the bytes the client sends:
//! [`Frames`] follows HTTP/2's frame headers (RFC 9113 section 4.1) through the stream.

use std::time::{Duration, Instant};

/// HTTP/2 frame type PING (RFC 9113 section 6.7) and its ACK flag.
const PING: u8 = 0x6;
const ACK: u8 = 0x1;

/// Strikes a connection may have; one more closes it (gRPC core's `max_ping_strikes`, 2).
const MAX_STRIKES: u32 = 2;

/// How far apart an idle client must ping when pings without calls are not permitted (gRPC
/// core's two hours).
const IDLE_INTERVAL: Duration = Duration::from_secs(2 * 60 * 60);

/// Where the client's bytes are in HTTP/2's frames (after the connection preface).
#[derive(Debug, Default)]
pub struct Frames {
    header: [u8; 9],
    have: usize,
    /// Payload bytes of the current frame still to pass.
    skip: usize,
}

impl Frames {
    /// The pings (not their acknowledgements) whose frame headers end in `bytes`.
    pub fn pings(&mut self, mut bytes: &[u8]) -> u32 {
        let mut pings = 0;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (9 - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == 9 {
                let h = self.header;
                self.skip = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
                self.have = 0;
                if h[3] == PING && h[4] & ACK == 0 {
                    pings += 1;
                }
            }
        }
        pings
    }
}

/// One connection's strikes.
#[derive(Debug)]
pub struct Policy {
    min_interval: Duration,
    permit_without_calls: bool,
    last: Option<Instant>,
    strikes: u32,
}

impl Policy {
    pub fn new(min_interval: Duration, permit_without_calls: bool) -> Self {
        Policy {
            min_interval,
            permit_without_calls,
            last: None,
            strikes: 0,
        }
    }

    /// A ping received at `now` (`idle`: no call open); true when it is one strike too many.
    pub fn ping(&mut self, now: Instant, idle: bool) -> bool {
        let interval = if idle && !self.permit_without_calls {
            IDLE_INTERVAL
        } else {
            self.min_interval
        };
        let too_soon = self.last.is_some_and(|last| now < last + interval);
        self.last = Some(now);
        if too_soon {
            self.strikes += 1;
        }
        self.strikes > MAX_STRIKES
    }

    /// A call ended (the server sent its answer): the strikes are forgiven and the clock reset.
    pub fn forgive(&mut self) {
        self.strikes = 0;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend([kind, flags, 0, 0, 0, 0]);
        out.extend(payload);
        out
    }

    #[test]
    fn pings_are_found_in_the_stream_however_it_is_split() {
        let mut stream = frame(0x4, 0, &[]); // SETTINGS
        stream.extend(frame(PING, 0, &[1; 8]));
        stream.extend(frame(0x0, 0, &[PING; 20])); // DATA whose bytes look like a ping's header
        stream.extend(frame(PING, ACK, &[2; 8])); // an acknowledgement: not a ping
        stream.extend(frame(PING, 0, &[3; 8]));
        for size in [1, 2, 5, 9, 13, stream.len()] {
            let mut frames = Frames::default();
            let found: u32 = stream.chunks(size).map(|chunk| frames.pings(chunk)).sum();
            assert_eq!(found, 2, "in chunks of {size}");
        }
    }

    #[test]
    fn the_third_strike_closes_as_grpc_core_counts_them() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut policy = Policy::new(Duration::from_secs(1), true);
        assert!(!policy.ping(at(0), false)); // the first is never too soon
        assert!(!policy.ping(at(1500), false)); // a second apart: fine
        assert!(!policy.ping(at(1600), false)); // strike 1
        assert!(!policy.ping(at(1700), false)); // strike 2
        assert!(policy.ping(at(1800), false)); // strike 3: closed
        policy.forgive();
        assert!(!policy.ping(at(1900), false)); // the clock reset too: not even a strike
        assert!(!policy.ping(at(2000), false)); // strike 1
        assert!(!policy.ping(at(2100), false)); // strike 2
    }

    #[test]
    fn without_a_call_pings_are_strikes_unless_permitted() {
        let start = Instant::now();
        let hour = |h: u64| start + Duration::from_secs(h * 60 * 60);
        let mut strict = Policy::new(Duration::from_secs(10), false);
        let mut permitted = Policy::new(Duration::from_secs(10), true);
        let idle = [hour(0), hour(1), hour(2)];
        assert!(idle.iter().all(|&t| !permitted.ping(t, true)));
        assert!(!strict.ping(hour(0), true));
        assert!(!strict.ping(hour(1), true)); // an hour apart is still too soon while idle
        assert!(!strict.ping(hour(2), true));
        assert!(strict.ping(hour(3), true));
        let mut busy = Policy::new(Duration::from_secs(10), false);
        assert!((0..5).all(|h| !busy.ping(hour(h), false))); // with a call open the interval is 10 s
    }
}
