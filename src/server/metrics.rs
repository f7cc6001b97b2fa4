//! `GET /metrics`: Prometheus text exposition (version 0.0.4) of requests by route and
//! status, tokens in and out, time to first token and time per token, queue depth and loaded
//! models.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
const FIRST_TOKEN_BUCKETS: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
const TOKEN_BUCKETS: [f64; 12] = [
    0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

/// A cumulative histogram with fixed buckets.
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    /// Sum in microseconds.
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|&b| s <= b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cum = 0;
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            cum += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// The server's counters.
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    prompt_tokens: AtomicU64,
    generated_tokens: AtomicU64,
    cancelled: AtomicU64,
    first_token: Histogram,
    per_token: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::new(BTreeMap::new()),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            first_token: Histogram::new(&FIRST_TOKEN_BUCKETS),
            per_token: Histogram::new(&TOKEN_BUCKETS),
        }
    }
}

/// What the registry reports at scrape time.
pub struct Gauges {
    pub queued: Vec<(String, usize)>,
    pub loaded: usize,
}

impl Metrics {
    /// A request answered: its method, route (the matched pattern, not the raw path) and status.
    pub fn request(&self, method: &str, route: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((method.to_string(), route.to_string(), status))
                .or_insert(0) += 1;
        }
    }

    /// Time from a request's arrival to its first generated token.
    pub fn first_token(&self, d: Duration) {
        self.first_token.observe(d);
    }

    /// Time between two generated tokens.
    pub fn next_token(&self, d: Duration) {
        self.per_token.observe(d);
    }

    pub fn tokens(&self, prompt: usize, generated: usize) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.generated_tokens
            .fetch_add(generated as u64, Ordering::Relaxed);
    }

    /// A generation ended because its client left.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text.
    pub fn render(&self, gauges: &Gauges) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP tritium_requests_total HTTP requests answered, by method, route and status.\n\
             # TYPE tritium_requests_total counter\n",
        );
        if let Ok(m) = self.requests.lock() {
            for ((method, route, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "tritium_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {n}",
                    escape(route)
                );
            }
        }
        for (name, help, v) in [
            (
                "tritium_prompt_tokens_total",
                "Prompt tokens processed.",
                &self.prompt_tokens,
            ),
            (
                "tritium_generated_tokens_total",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "tritium_cancelled_generations_total",
                "Generations ended because the client disconnected.",
                &self.cancelled,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        self.first_token.write(
            &mut out,
            "tritium_time_to_first_token_seconds",
            "From a request's arrival (queue wait included) to its first generated token.",
        );
        self.per_token.write(
            &mut out,
            "tritium_time_per_output_token_seconds",
            "Between consecutive generated tokens.",
        );
        out.push_str(
            "# HELP tritium_queue_depth Requests waiting or running, by model.\n\
             # TYPE tritium_queue_depth gauge\n",
        );
        for (model, n) in &gauges.queued {
            let _ = writeln!(
                out,
                "tritium_queue_depth{{model=\"{}\"}} {n}",
                escape(model)
            );
        }
        let _ = writeln!(
            out,
            "# HELP tritium_loaded_models Models loaded.\n# TYPE tritium_loaded_models gauge\n\
             tritium_loaded_models {}",
            gauges.loaded
        );
        out
    }
}

/// A label value as the exposition format quotes it.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
