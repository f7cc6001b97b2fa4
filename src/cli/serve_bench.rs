//! `tritium bench serve`: N concurrent streaming clients against an OpenAI-compatible server
//! (`tritium serve`, llama-server, ...), each sending R chat completions one after another,
//! reporting time to first token and inter-token latency (p50, p99) and the aggregate
//! completion tokens per second.
//!
//! - Time to first token: from writing the request to the first chunk with content.
//! - Inter-token latency: the gaps between a response's content chunks (a server sends one per
//!   token, except where a token completes no character yet).
//! - Tokens per second: the completion tokens of every response (its `usage`, asked for with
//!   `stream_options.include_usage`; the content chunks where a server sends none) over the
//!   wall time from the first request to the last response.
//!
//! The client is a plain HTTP/1.1 one over tokio (one connection per request, `Connection:
//! close`), so what is measured is the server, not a client library.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::cli::Error;

/// `tritium bench serve` options.
pub struct ServeBenchArgs {
    pub url: String,
    pub model: String,
    pub clients: usize,
    pub requests: usize,
    pub max_tokens: usize,
    pub prompt: String,
    pub api_key: Option<String>,
    pub json: bool,
}

/// One response's figures.
#[derive(Default)]
struct Timed {
    ttft_ms: Option<f64>,
    gaps_ms: Vec<f64>,
    tokens: usize,
}

#[derive(Serialize)]
struct Percentiles {
    p50: f64,
    p99: f64,
}

#[derive(Serialize)]
struct Report {
    url: String,
    model: String,
    clients: usize,
    requests_per_client: usize,
    max_tokens: usize,
    requests: usize,
    errors: usize,
    /// The first few errors' messages.
    error_samples: Vec<String>,
    wall_s: f64,
    completion_tokens: usize,
    tokens_per_s: f64,
    ttft_ms: Percentiles,
    inter_token_ms: Percentiles,
}

/// `host:port` and the path prefix of an `http://` URL (a trailing `/v1` dropped).
fn parse_url(url: &str) -> Result<(String, String), Error> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::Usage(format!(
            "--url {url:?}: an http:// URL is expected (this client speaks plain HTTP)"
        ))
    })?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if host.is_empty() {
        return Err(Error::Usage(format!("--url {url:?}: no host")));
    }
    let host = if host.contains(':') && !host.ends_with(']') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix("/v1").unwrap_or(path);
    Ok((host, path.to_string()))
}

/// The value at fraction `p` of `v` (nearest rank); 0 when empty.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Read one line (CRLF or LF) of at most 64 KiB.
async fn line<R: AsyncBufReadExt + Unpin>(r: &mut R) -> Result<String, String> {
    let mut buf = Vec::new();
    let n = (&mut *r)
        .take(64 << 10)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("the connection closed early".into());
    }
    Ok(String::from_utf8_lossy(&buf).trim_end().to_string())
}

/// One streamed chat completion, timed.
async fn one(addr: &str, path: &str, body: &str, key: Option<&str>) -> Result<Timed, String> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let mut r = BufReader::new(tcp);
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    let head = format!(
        "POST {path}/v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         {auth}Content-Type: application/json\r\nAccept: text/event-stream\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    let sent = Instant::now();
    r.get_mut()
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let status = line(&mut r).await?;
    let code: u16 = status
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status:?}"))?;
    let mut chunked = false;
    loop {
        let h = line(&mut r).await?;
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                chunked = true;
            }
        }
    }
    let mut timed = Timed::default();
    let mut pending = String::new();
    let mut last: Option<Instant> = None;
    let mut done = false;
    let mut usage_tokens = None;
    let mut content_chunks = 0;
    let mut error = None;
    loop {
        // The next piece of the body.
        let data = if chunked {
            let size = line(&mut r).await?;
            let n = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("bad chunk size {size:?}"))?;
            if n == 0 {
                break;
            }
            let mut data = vec![0; n + 2];
            r.read_exact(&mut data).await.map_err(|e| e.to_string())?;
            data.truncate(n);
            data
        } else {
            let mut data = vec![0; 16 << 10];
            let n = r.read(&mut data).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            data.truncate(n);
            data
        };
        let now = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&data));
        if code != 200 {
            continue;
        }
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(payload) = event.trim().strip_prefix("data:") else {
                continue;
            };
            let payload = payload.trim();
            if payload == "[DONE]" {
                done = true;
                continue;
            }
            let v: Value = serde_json::from_str(payload).map_err(|e| format!("{e}: {payload}"))?;
            if let Some(e) = v.get("error") {
                error = Some(e.to_string());
            }
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                usage_tokens = Some(n as usize);
            }
            let has_content = v["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| !c.is_empty());
            if has_content {
                content_chunks += 1;
                match last {
                    None => timed.ttft_ms = Some((now - sent).as_secs_f64() * 1e3),
                    Some(t) => timed.gaps_ms.push((now - t).as_secs_f64() * 1e3),
                }
                last = Some(now);
            }
        }
    }
    if code != 200 {
        return Err(format!("HTTP {code}: {}", pending.trim()));
    }
    if let Some(e) = error {
        return Err(format!("error event: {e}"));
    }
    if !done {
        return Err("the stream ended without data: [DONE]".into());
    }
    timed.tokens = usage_tokens.unwrap_or(content_chunks);
    Ok(timed)
}

/// Run the benchmark and print its report.
pub fn serve(args: &ServeBenchArgs) -> Result<ExitCode, Error> {
    if args.clients == 0 || args.requests == 0 || args.max_tokens == 0 {
        return Err(Error::Usage(
            "--clients, --requests and --max-tokens must be at least 1".into(),
        ));
    }
    let (addr, path) = parse_url(&args.url)?;
    let body = json!({
        "model": args.model,
        "messages": [{ "role": "user", "content": args.prompt }],
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "stream": true,
        "stream_options": { "include_usage": true },
    })
    .to_string();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Usage(format!("tokio runtime: {e}")))?;
    let start = Instant::now();
    let results: Vec<Result<Timed, String>> = rt.block_on(async {
        let tasks: Vec<_> = (0..args.clients)
            .map(|_| {
                let (addr, path, body) = (addr.clone(), path.clone(), body.clone());
                let key = args.api_key.clone();
                let requests = args.requests;
                tokio::spawn(async move {
                    let mut out = Vec::with_capacity(requests);
                    for _ in 0..requests {
                        out.push(one(&addr, &path, &body, key.as_deref()).await);
                    }
                    out
                })
            })
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            match t.await {
                Ok(v) => all.extend(v),
                Err(e) => all.push(Err(format!("client task: {e}"))),
            }
        }
        all
    });
    let wall = start.elapsed().max(Duration::from_nanos(1)).as_secs_f64();
    let mut ttft = Vec::new();
    let mut gaps = Vec::new();
    let mut tokens = 0;
    let mut errors = Vec::new();
    for r in &results {
        match r {
            Ok(t) => {
                ttft.extend(t.ttft_ms);
                gaps.extend_from_slice(&t.gaps_ms);
                tokens += t.tokens;
            }
            Err(e) => errors.push(e.clone()),
        }
    }
    let report = Report {
        url: args.url.clone(),
        model: args.model.clone(),
        clients: args.clients,
        requests_per_client: args.requests,
        max_tokens: args.max_tokens,
        requests: results.len(),
        errors: errors.len(),
        error_samples: errors.iter().take(5).cloned().collect(),
        wall_s: wall,
        completion_tokens: tokens,
        tokens_per_s: tokens as f64 / wall,
        ttft_ms: Percentiles {
            p50: percentile(&mut ttft, 0.5),
            p99: percentile(&mut ttft, 0.99),
        },
        inter_token_ms: Percentiles {
            p50: percentile(&mut gaps, 0.5),
            p99: percentile(&mut gaps, 0.99),
        },
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        println!(
            "{} clients x {} requests ({} tokens at most) against {} ({}):",
            report.clients, report.requests_per_client, report.max_tokens, report.url, report.model
        );
        println!(
            "  time to first token   p50 {:8.1} ms   p99 {:8.1} ms",
            report.ttft_ms.p50, report.ttft_ms.p99
        );
        println!(
            "  inter-token latency   p50 {:8.1} ms   p99 {:8.1} ms",
            report.inter_token_ms.p50, report.inter_token_ms.p99
        );
        println!(
            "  {} completion tokens in {:.2} s: {:.1} tokens/s; {} requests, {} errors",
            report.completion_tokens,
            report.wall_s,
            report.tokens_per_s,
            report.requests,
            report.errors
        );
        for e in &report.error_samples {
            println!("  error: {e}");
        }
    }
    Ok(if report.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_percentiles() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080/v1/").unwrap(),
            ("127.0.0.1:8080".into(), String::new())
        );
        assert_eq!(
            parse_url("http://example.org/proxy").unwrap(),
            ("example.org:80".into(), "/proxy".into())
        );
        assert!(parse_url("https://x").is_err());
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&mut v, 0.5), 50.0);
        assert_eq!(percentile(&mut v, 0.99), 99.0);
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }
}
