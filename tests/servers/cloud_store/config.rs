//! What the store imitates: latency, rates, a slow tail, stalls. Settable at start (flags)
//! and while it runs (`/_ib/config?KEY=VALUE&...`), so one benchmark run can go through
//! several settings without restarting the server.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use serde::Serialize;

/// One setting of the network and the store.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Shaping {
    /// Time to first byte of every request (before the response headers).
    #[serde(serialize_with = "as_ms")]
    pub ttfb: Duration,
    /// Bytes/s of one connection (0: unlimited).
    pub conn_rate: f64,
    /// Bytes/s of the interface all connections share (0: unlimited).
    pub rate: f64,
    /// Share of requests (0..1) that wait `tail_extra` more before their first byte.
    pub tail_share: f64,
    /// The slow tail's extra wait.
    #[serde(serialize_with = "as_ms")]
    pub tail_extra: Duration,
    /// The first GET of a path containing one of these never answers (until the client
    /// gives up on it): a read only a second request can finish, for tests of hedging.
    pub stall: Vec<String>,
    /// Seed of the slow-tail draw.
    pub seed: u64,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl Shaping {
    /// Apply one `KEY=VALUE` setting: `ttfb_ms`, `conn_rate`, `rate`, `tail` (`SHARE:MS`),
    /// `stall` (comma-separated path parts; empty clears), `seed`.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "ttfb_ms" => self.ttfb = Duration::from_secs_f64(number(key, value)? / 1e3),
            "conn_rate" => self.conn_rate = rate(value)?,
            "rate" => self.rate = rate(value)?,
            "tail" => (self.tail_share, self.tail_extra) = tail(value)?,
            "stall" => self.stall = value.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            "seed" => self.seed = value.parse().map_err(|_| format!("seed must be an integer, got {value:?}"))?,
            other => {
                return Err(format!(
                    "unknown setting {other:?}; use ttfb_ms, conn_rate, rate, tail (SHARE:MS), stall or seed"
                ));
            }
        }
        Ok(())
    }
}

fn number(key: &str, value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{key} must be a number >= 0, got {value:?}")),
    }
}

/// `40MB` (10^6 bytes/s), `1.5GB`, `512KB`, or plain bytes/s; `0` is unlimited.
pub fn rate(value: &str) -> Result<f64, String> {
    let v = value.trim();
    let (digits, scale) = [("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1.0)]
        .iter()
        .find_map(|(unit, scale)| v.strip_suffix(unit).map(|d| (d, *scale)))
        .unwrap_or((v, 1.0));
    number("a rate", digits.trim()).map(|n| n * scale)
}

/// `SHARE:MS`, e.g. `0.01:1000` (1% of requests wait one second more).
fn tail(value: &str) -> Result<(f64, Duration), String> {
    let bad = || format!("tail must be SHARE:MS with SHARE in 0..1, e.g. 0.01:1000, got {value:?}");
    let (share, ms) = value.split_once(':').ok_or_else(bad)?;
    let share: f64 = share.parse().map_err(|_| bad())?;
    let ms: f64 = ms.parse().map_err(|_| bad())?;
    if !(0.0..=1.0).contains(&share) || !ms.is_finite() || ms < 0.0 {
        return Err(bad());
    }
    Ok((share, Duration::from_secs_f64(ms / 1e3)))
}

/// The live setting, read by every request and every paced write.
#[derive(Debug, Default)]
pub struct Config {
    shaping: RwLock<Shaping>,
}

impl Config {
    pub fn new(shaping: Shaping) -> Self {
        Self { shaping: RwLock::new(shaping) }
    }

    pub fn shaping(&self) -> Shaping {
        self.shaping.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Apply `KEY=VALUE` settings all or none.
    pub fn update<'a>(&self, settings: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Shaping, String> {
        let mut next = self.shaping();
        for (k, v) in settings {
            next.set(k, v)?;
        }
        *self.shaping.write().unwrap_or_else(PoisonError::into_inner) = next.clone();
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Shaping, rate};

    #[test]
    fn rates_and_settings_parse_and_bad_ones_say_what_to_write() {
        assert_eq!(rate("40MB"), Ok(40e6));
        assert_eq!(rate("1.5GB"), Ok(1.5e9));
        assert_eq!(rate("1000"), Ok(1000.0));
        assert!(rate("fast").unwrap_err().contains("number"));
        let mut s = Shaping::default();
        s.set("tail", "0.01:1000").unwrap();
        assert_eq!((s.tail_share, s.tail_extra), (0.01, Duration::from_secs(1)));
        s.set("ttfb_ms", "20").unwrap();
        assert_eq!(s.ttfb, Duration::from_millis(20));
        s.set("stall", "c/0/1,c/0/2").unwrap();
        assert_eq!(s.stall, ["c/0/1", "c/0/2"]);
        assert!(s.set("tail", "2:10").unwrap_err().contains("SHARE in 0..1"));
        assert!(s.set("latency", "1").unwrap_err().contains("ttfb_ms"));
    }
}
