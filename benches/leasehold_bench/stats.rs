//! Percentiles over latency samples (milliseconds).

use serde::Serialize;

/// Summary of a sample set, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
    /// Smallest sample.
    pub min: f64,
    /// Mean.
    pub mean: f64,
}

/// Nearest-rank percentile of sorted samples (`q` in 0..=1).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

/// Summary of `samples` (any order).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        return Summary {
            p50: f64::NAN,
            p90: f64::NAN,
            p99: f64::NAN,
            max: f64::NAN,
            min: f64::NAN,
            mean: f64::NAN,
            n: 0,
        };
    }
    Summary {
        n: s.len(),
        p50: percentile(&s, 0.50),
        p90: percentile(&s, 0.90),
        p99: percentile(&s, 0.99),
        max: s[s.len() - 1],
        min: s[0],
        mean: s.iter().sum::<f64>() / s.len() as f64,
    }
}

/// Spreads timer phases: a pseudo-random duration in [0, max).
pub fn random_below(max: std::time::Duration) -> std::time::Duration {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: AtomicU64 = AtomicU64::new(0x2545_F491_4F6C_DD1D);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64);
    let mut x = SEED.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed) ^ now.unwrap_or(1);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::time::Duration::from_nanos(x % (max.as_nanos().max(1) as u64))
}
