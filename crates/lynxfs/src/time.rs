//! Wall-clock time: the file system's clock in nanoseconds since the Unix epoch, and
//! `Timestamp`, an instant as Linux keeps it (signed seconds plus nanoseconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NS: u64 = 1_000_000_000;

/// Now, in nanoseconds since the Unix epoch (0 if the clock is before 1970): the
/// clock `SystemTime::now` reads, read directly (every create and rename reads it,
/// and `SystemTime`'s `Duration` arithmetic cost more than the clock).
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Now by the coarse clock (`CLOCK_REALTIME_COARSE`: the last tick's time, a few
/// milliseconds behind at most, read without the cost of the precise clock), in
/// nanoseconds since the epoch (0 on error or before 1970): for checks that count
/// days, not for times that are stored.
pub fn now_coarse_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME_COARSE)
}

/// `clock`'s time in nanoseconds since the epoch (0 on error or before 1970).
#[inline]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call; clock_gettime writes
    // only it and has no other effect.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    if r != 0 || ts.tv_sec < 0 {
        return 0;
    }
    ts.tv_sec as u64 * NS + ts.tv_nsec as u64
}

/// An instant as Linux's `timespec64`: seconds since the Unix epoch (negative before
/// 1970) and nanoseconds within the second (always below 1,000,000,000), so every
/// time Linux accepts, from `i64::MIN` to `i64::MAX` seconds, is one value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

impl Timestamp {
    /// `sec` seconds and `nsec` nanoseconds; None when `nsec` is not in 0..1e9.
    pub fn new(sec: i64, nsec: i64) -> Option<Timestamp> {
        let nsec = u32::try_from(nsec).ok().filter(|&n| u64::from(n) < NS)?;
        Some(Timestamp { sec, nsec })
    }

    /// The instant `ns` nanoseconds after the epoch.
    pub fn from_ns(ns: u64) -> Timestamp {
        Timestamp {
            sec: (ns / NS) as i64,
            nsec: (ns % NS) as u32,
        }
    }

    /// Now, by the system clock (before 1970 too).
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// Nanoseconds since the epoch, when the instant is between 1970 and the end of
    /// what a `u64` of nanoseconds holds (the year 2554).
    pub fn as_ns(self) -> Option<u64> {
        let sec = u64::try_from(self.sec).ok()?;
        sec.checked_mul(NS)?.checked_add(u64::from(self.nsec))
    }

    /// `t` exactly (a `SystemTime` on Linux is a `timespec64` too).
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp {
                sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nsec: d.subsec_nanos(),
            },
            Err(before) => Timestamp::before_epoch(before.duration()),
        }
    }

    /// The instant `d` before the epoch, saturated at the earliest `Timestamp`.
    fn before_epoch(d: Duration) -> Timestamp {
        let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
        // -secs - 1 seconds plus (1e9 - nanos) nanoseconds when there is a fraction.
        let whole = secs + u64::from(nanos > 0);
        let Some(sec) = 0i64.checked_sub_unsigned(whole) else {
            return Timestamp {
                sec: i64::MIN,
                nsec: 0,
            };
        };
        let nsec = if nanos > 0 { NS as u32 - nanos } else { 0 };
        Timestamp { sec, nsec }
    }

    /// The same instant as a `SystemTime`, which holds every `Timestamp` on Linux.
    pub fn to_system_time(self) -> SystemTime {
        let whole = Duration::from_secs(self.sec.unsigned_abs());
        let base = if self.sec >= 0 {
            UNIX_EPOCH.checked_add(whole)
        } else {
            UNIX_EPOCH.checked_sub(whole)
        };
        // Adding under a second to a whole second never leaves the range.
        base.and_then(|b| b.checked_add(Duration::from_nanos(u64::from(self.nsec))))
            .unwrap_or(UNIX_EPOCH)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_time_round_trips_at_the_ends_of_the_range() {
        for t in [
            Timestamp::new(i64::MIN, 0).unwrap(),
            Timestamp::new(i64::MIN, 999_999_999).unwrap(),
            Timestamp::new(-1, 500_000_000).unwrap(),
            Timestamp::new(-2_147_483_648, 0).unwrap(),
            Timestamp::new(0, 0).unwrap(),
            Timestamp::new(1_700_000_000, 123).unwrap(),
            Timestamp::new(i64::MAX, 999_999_999).unwrap(),
        ] {
            assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
        }
    }

    /// The clock read directly is the one `SystemTime` reads.
    #[test]
    fn now_ns_reads_the_system_clock() {
        let since = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        let before = since(SystemTime::now());
        let now = now_ns();
        let after = since(SystemTime::now());
        assert!(before <= now && now <= after, "{before} {now} {after}");
    }

    #[test]
    fn nanoseconds_fit_only_from_1970_to_2554() {
        assert_eq!(
            Timestamp::from_ns(1_500_000_001).as_ns(),
            Some(1_500_000_001)
        );
        assert_eq!(Timestamp::new(-1, 0).unwrap().as_ns(), None);
        assert_eq!(Timestamp::new(20_000_000_000, 0).unwrap().as_ns(), None);
        assert_eq!(Timestamp::new(0, 1_000_000_000), None);
        assert_eq!(Timestamp::new(0, -1), None);
    }
}
