//! A running `tritium serve` for the tests, and a plain HTTP/1.1 client over `TcpStream` (so
//! requests go out exactly as written, bytes that are not UTF-8 included, and a test can
//! close a connection half-way through a stream).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

pub const MODEL_FILE: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
/// The name the server lists the model under: its file stem.
pub const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

pub fn tritium() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tritium"));
    c.env_remove("TRITIUM_API_KEY");
    c
}

/// A running `tritium serve` on a free loopback port, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub port: u16,
    pub store: tempfile::TempDir,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    /// `tritium serve MODEL --backend cpu --port 0 --store <temp> ARGS...`.
    pub fn start(args: &[&str]) -> Server {
        Server::start_in(tempfile::tempdir().expect("temp dir"), args)
    }

    pub fn start_in(store: tempfile::TempDir, args: &[&str]) -> Server {
        Server::start_on("cpu", store, args)
    }

    /// [`Server::start_in`] on `backend` (`cpu` or `gpu`).
    pub fn start_on(backend: &str, store: tempfile::TempDir, args: &[&str]) -> Server {
        let mut child = tritium()
            .args([
                "serve",
                MODEL_FILE,
                "--backend",
                backend,
                "--port",
                "0",
                "--store",
            ])
            .arg(store.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tritium serve starts");
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(addr) = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
        else {
            let _ = child.kill();
            let err = stderr.join().unwrap_or_default();
            panic!("no URL printed: {line:?}; stderr: {err}");
        };
        let addr = addr.to_string();
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Server {
            child,
            addr,
            port,
            store,
            stderr: Some(stderr),
        }
    }

    pub fn store_path(&self) -> &Path {
        self.store.path()
    }

    /// Wait for the process to exit by itself; its exit code and stderr.
    pub fn wait(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().expect("waits");
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        (status.code(), err)
    }

    pub fn get(&self, path: &str) -> Reply {
        request(&self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, body: &str) -> Reply {
        request(&self.addr, "POST", path, &[], body.as_bytes())
    }

    pub fn post_json(&self, path: &str, body: &serde_json::Value) -> Reply {
        self.post(path, &body.to_string())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The `data:` payloads of a server-sent event stream.
    pub fn sse_data(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    /// The lines of an NDJSON body, parsed.
    pub fn ndjson(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// Write a request on a new connection (`Connection: close`).
pub fn send(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).expect("connects");
    tcp.set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).unwrap();
    tcp.write_all(body).unwrap();
    tcp
}

/// Read a response's status line and headers.
pub fn read_head(r: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (status, headers)
}

/// Read one chunk of a chunked body (`None` at its end).
pub fn read_chunk(r: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut size = String::new();
    r.read_line(&mut size).ok()?;
    let n = usize::from_str_radix(size.trim(), 16).ok()?;
    let mut data = vec![0; n + 2];
    r.read_exact(&mut data).ok()?;
    data.truncate(n);
    (n > 0).then_some(data)
}

/// One request, the whole response.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let tcp = send(addr, method, path, headers, body);
    let mut r = BufReader::new(tcp);
    let (status, headers) = read_head(&mut r);
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(&mut r) {
            body.extend_from_slice(&c);
        }
    } else {
        let _ = r.read_to_end(&mut body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

/// `tritium run --chat --temperature 0` on the same model: its text.
pub fn cli_greedy_chat(prompt: &str, max_tokens: usize) -> String {
    let out = tritium()
        .args([
            "run",
            MODEL_FILE,
            "--backend",
            "cpu",
            "--chat",
            "--temperature",
            "0",
            "--json",
        ])
        .args(["--max-tokens", &max_tokens.to_string(), "-p", prompt])
        .output()
        .expect("tritium run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["text"].as_str().unwrap().to_string()
}

/// A counter of `/metrics`.
pub fn metric(server: &Server, name: &str) -> f64 {
    let text = server.get("/metrics").text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

pub fn repo_path(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// A chat completion request for the test model with `extra` fields.
pub fn chat(content: &str, extra: Value) -> Value {
    let mut v = json!({
        "model": MODEL,
        "messages": [{ "role": "user", "content": content }],
    });
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// Open a streaming chat that generates many tokens; returns the reader once the response's
/// head has arrived (the generation is then running).
pub fn open_stream(server: &Server, max_tokens: u32) -> BufReader<std::net::TcpStream> {
    let body = chat(
        "Write a very long story about a dragon.",
        json!({ "max_tokens": max_tokens, "stream": true, "temperature": 0 }),
    );
    let tcp = send(
        &server.addr,
        "POST",
        "/v1/chat/completions",
        &[],
        body.to_string().as_bytes(),
    );
    let mut r = BufReader::new(tcp);
    let (status, _) = read_head(&mut r);
    assert_eq!(status, 200);
    r
}
