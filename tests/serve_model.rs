//! `tritium serve-model` end to end: the real binary on a free loopback port (`--port 0`), and a
//! plain HTTP/1.1 client over `TcpStream` (so requests go out exactly as written: raw `..`
//! paths and percent-encoded ones are not normalized away by a client library).
//!
//! Checked: content types, Range as RFC 9110 has it (206 with Content-Range, 416 with
//! `bytes */len`, the whole file for a range not understood or for several ranges), HEAD,
//! strong ETag with If-None-Match (304) and If-Range, CORS headers and preflight, path
//! traversal refused, only regular files inside the folder served (symlinks resolved first),
//! the connection limits (header, idle and send timeouts, at most N connections) on real
//! sockets, and convert-and-serve of a GGUF reusing its earlier conversion.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TINY_I2S: &str = "tests/fixtures/bitnet/tiny-i2s.gguf";

/// A running `tritium serve-model`, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tritium"))
            .arg("serve-model")
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starts");
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
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .unwrap_or_else(|| panic!("no URL printed: {line:?}"))
            .to_string();
        Server {
            child,
            addr,
            stderr: Some(stderr),
        }
    }

    /// Stop the server and return what it printed on stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A parsed response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The text of a request, `Connection: close` unless `keep_alive`.
fn request_text(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    keep_alive: bool,
) -> String {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    if !keep_alive {
        req.push_str("Connection: close\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
}

/// Send one request (`Connection: close`) and read the whole reply. The read gives up after
/// 30 s, far beyond any answer from loopback, so a server that hangs fails the test instead of
/// blocking it.
fn request(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(request_text(addr, method, path, headers, false).as_bytes())
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    parse_reply(&raw)
}

/// A whole reply (head and body) as read from the socket.
fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header section");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    }
}

fn get(addr: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    request(addr, "GET", path, headers)
}

/// Read one reply of a kept-alive connection: the head, then `Content-Length` bytes of body.
fn read_reply(s: &mut TcpStream) -> Reply {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut byte).unwrap(), 1, "closed inside a reply head");
        raw.push(byte[0]);
    }
    let head = parse_reply(&raw);
    let len: usize = head.header("content-length").unwrap().parse().unwrap();
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    raw.extend_from_slice(&body);
    parse_reply(&raw)
}

/// How long after the call the server closed `s` (end of stream or reset), reading and
/// discarding whatever arrives meanwhile; `None` if it is still open after `limit`. Polls
/// every 20 ms, which bounds this measurement's own error.
fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some(start.elapsed()),
        }
        if start.elapsed() > limit {
            return None;
        }
    }
}

fn convert(gguf: &str, out: &Path) {
    let o: Output = Command::new(env!("CARGO_BIN_EXE_tritium"))
        .args([
            "convert",
            gguf,
            out.to_str().unwrap(),
            "--shard-size",
            "64KB",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn serves_an_rdrr_folder_with_ranges_etags_cors_and_no_escape() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("model");
    convert(TINY_I2S, &dir);
    std::fs::write(tmp.path().join("secret.txt"), b"not for you").unwrap();
    let server = Server::start(&[dir.to_str().unwrap()]);
    let a = server.addr.clone();
    assert!(a.starts_with("127.0.0.1:"), "{a}");

    // Whole files, with their types, validators and CORS headers.
    let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
    let r = get(&a, "/manifest.json", &[("Origin", "http://example.org")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body, manifest);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let exposed = r
        .header("access-control-expose-headers")
        .unwrap()
        .to_ascii_lowercase();
    for h in ["content-range", "content-length", "etag", "accept-ranges"] {
        assert!(exposed.contains(h), "{exposed}");
    }
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    assert!(
        etag.starts_with('"') && etag.ends_with('"'),
        "strong: {etag}"
    );

    let shard = std::fs::read(dir.join("shard_00000.bin")).unwrap();
    let r = get(&a, "/shard_00000.bin", &[]);
    assert_eq!((r.status, r.body.len()), (200, shard.len()));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));
    let shard_etag = r.header("etag").unwrap().to_string();
    assert_ne!(shard_etag, etag);

    // Range: 206 with the bytes and Content-Range; an open range; 416 past the end.
    let r = get(&a, "/shard_00000.bin", &[("Range", "bytes=100-1099")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &shard[100..1100]);
    let len = shard.len();
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 100-1099/{len}").as_str())
    );
    assert_eq!(r.header("content-length"), Some("1000"));
    assert_eq!(r.header("etag"), Some(shard_etag.as_str()));
    let r = get(
        &a,
        "/shard_00000.bin",
        &[("Range", &format!("bytes={}-", len - 10))],
    );
    assert_eq!((r.status, &r.body[..]), (206, &shard[len - 10..]));
    let r = get(
        &a,
        "/shard_00000.bin",
        &[("Range", &format!("bytes={len}-"))],
    );
    assert_eq!(r.status, 416);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes */{len}").as_str())
    );
    assert_eq!(r.header("etag"), Some(shard_etag.as_str()));

    // HEAD: the headers of a GET, no body.
    let r = request(&a, "HEAD", "/shard_00000.bin", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));
    assert!(r.body.is_empty());

    // If-None-Match: 304 while the file is unchanged; 200 for another tag.
    let r = get(&a, "/manifest.json", &[("If-None-Match", &etag)]);
    assert_eq!((r.status, r.body.len()), (304, 0));
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = get(
        &a,
        "/manifest.json",
        &[("If-None-Match", "\"other\", W/".to_string().as_str())],
    );
    assert_eq!(r.status, 200);
    // A date does not overrule If-None-Match (RFC 9110 §13.1.3): a file modified long before
    // 2100 would be "not modified since" then, yet the tag does not match.
    let r = get(
        &a,
        "/manifest.json",
        &[
            ("If-None-Match", "\"other\""),
            ("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT"),
        ],
    );
    assert_eq!((r.status, r.body.len()), (200, manifest.len()));
    // Without If-None-Match the date is honoured.
    let r = get(
        &a,
        "/manifest.json",
        &[("If-Modified-Since", "Fri, 01 Jan 2100 00:00:00 GMT")],
    );
    assert_eq!(r.status, 304);

    // If-Range: the range while the validator matches, the whole file when it does not.
    let r = get(
        &a,
        "/shard_00000.bin",
        &[("Range", "bytes=0-9"), ("If-Range", &shard_etag)],
    );
    assert_eq!((r.status, &r.body[..]), (206, &shard[..10]));
    let r = get(
        &a,
        "/shard_00000.bin",
        &[("Range", "bytes=0-9"), ("If-Range", "\"stale\"")],
    );
    assert_eq!((r.status, r.body.len()), (200, len));

    // CORS preflight.
    let r = request(
        &a,
        "OPTIONS",
        "/shard_00000.bin",
        &[
            ("Origin", "http://example.org"),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "range, if-none-match"),
        ],
    );
    assert!(r.status == 200 || r.status == 204, "{r:?}");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let allowed = r
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("range") && allowed.contains("if-none-match"),
        "{allowed}"
    );
    assert!(r
        .header("access-control-allow-methods")
        .unwrap()
        .contains("GET"));

    // Nothing outside the folder, however the path is spelled.
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E%2Fsecret.txt",
        "/shard_00000.bin/../../secret.txt",
        "/..%5csecret.txt",
        "/./manifest.json",
    ] {
        let r = get(&a, path, &[]);
        assert_eq!(r.status, 400, "{path}: {r:?}");
        assert!(!String::from_utf8_lossy(&r.body).contains("not for you"));
    }
    assert_eq!(get(&a, "/missing.bin", &[]).status, 404);
    assert_eq!(get(&a, "/", &[]).status, 404);
    server.stop();
}

#[test]
fn a_gguf_is_converted_once_and_served() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let gguf = tmp.path().join("tiny.gguf");
    std::fs::copy(TINY_I2S, &gguf).unwrap();
    let args = [gguf.to_str().unwrap(), "--store", store.to_str().unwrap()];

    let server = Server::start(&args);
    let r = get(&server.addr, "/manifest.json", &[]);
    assert_eq!(r.status, 200);
    let manifest: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(manifest["quantization"], "I2_S");
    let shard = manifest["shards"][0]["fileName"]
        .as_str()
        .unwrap()
        .to_string();
    let r = get(&server.addr, &format!("/{shard}"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body.len() as u64,
        manifest["shards"][0]["size"].as_u64().unwrap()
    );
    let first = server.stop();
    assert!(first.contains("converting"), "{first}");

    let converted: Vec<_> = std::fs::read_dir(store.join("converted"))
        .unwrap()
        .collect();
    assert_eq!(converted.len(), 1);

    // Unchanged: the conversion is reused.
    let server = Server::start(&args);
    assert_eq!(get(&server.addr, "/manifest.json", &[]).status, 200);
    let second = server.stop();
    assert!(second.contains("reusing"), "{second}");
    assert_eq!(
        std::fs::read_dir(store.join("converted")).unwrap().count(),
        1
    );
}

/// A converted tiny model in `<tmp>/model`, with `empty.bin` (zero bytes) beside its files.
fn model_folder(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("model");
    convert(TINY_I2S, &dir);
    std::fs::write(dir.join("empty.bin"), b"").unwrap();
    dir
}

#[test]
fn ranges_follow_rfc_9110() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = model_folder(tmp.path());
    let shard = std::fs::read(dir.join("shard_00000.bin")).unwrap();
    let len = shard.len();
    let server = Server::start(&[dir.to_str().unwrap()]);
    let a = server.addr.clone();
    let path = "/shard_00000.bin";

    // One satisfiable range: 206 with exactly those bytes.
    for (range, first, last) in [
        ("bytes=0-0".to_string(), 0, 0),
        ("bytes=-500".to_string(), len - 500, len - 1),
        (format!("bytes=-{}", len * 2), 0, len - 1),
        ("bytes=100-".to_string(), 100, len - 1),
        ("bytes=5-99999999999999999999999".to_string(), 5, len - 1),
        ("Bytes=5-9".to_string(), 5, 9),
        ("bytes=, 5-9 ,".to_string(), 5, 9),
    ] {
        let r = get(&a, path, &[("Range", &range)]);
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.body, &shard[first..=last], "{range}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes {first}-{last}/{len}").as_str()),
            "{range}"
        );
    }

    // No satisfiable byte: 416 naming the length.
    for range in [
        format!("bytes={len}-"),
        format!("bytes={len}-{}", len + 10),
        "bytes=-0".to_string(),
        "bytes=99999999999999999999999-".to_string(),
    ] {
        let r = get(&a, path, &[("Range", &range)]);
        assert_eq!(r.status, 416, "{range}");
        assert_eq!(
            r.header("content-range"),
            Some(format!("bytes */{len}").as_str()),
            "{range}"
        );
        assert!(r.body.is_empty(), "{range}");
    }

    // Not understood (invalid, another unit) or several ranges: ignored, the whole file.
    for range in [
        "bytes=abc",
        "items=0-5",
        "bytes=5-2",
        "bytes=",
        "bytes=+1-2",
        "bytes=0-1;5-9",
        "bytes=0-1,5-9",
        "bytes=0-1, -3",
        "bytes=0-1,0-1",
    ] {
        let r = get(&a, path, &[("Range", range)]);
        assert_eq!((r.status, r.body.len()), (200, len), "{range}");
        assert_eq!(r.header("content-range"), None, "{range}");
        assert_eq!(r.body, shard, "{range}");
    }
    // Two Range fields are not one range set.
    let r = get(&a, path, &[("Range", "bytes=0-1"), ("Range", "bytes=5-9")]);
    assert_eq!((r.status, r.body.len()), (200, len));
    // A matching If-Range does not make an invalid range valid.
    let etag = get(&a, path, &[]).header("etag").unwrap().to_string();
    let r = get(&a, path, &[("Range", "bytes=abc"), ("If-Range", &etag)]);
    assert_eq!((r.status, r.body.len()), (200, len));
    // Ranges apply to GET only: HEAD describes the whole file.
    let r = request(&a, "HEAD", path, &[("Range", "bytes=0-9")]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(len.to_string().as_str()));

    // An empty file has no byte to send: `bytes=0-` is unsatisfiable, while a suffix asks for
    // the whole (empty) file.
    let r = get(&a, "/empty.bin", &[("Range", "bytes=0-")]);
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */0"));
    let r = get(&a, "/empty.bin", &[("Range", "bytes=-5")]);
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(r.header("content-length"), Some("0"));
    server.stop();
}

#[cfg(unix)]
#[test]
fn only_regular_files_inside_the_folder_are_served() {
    use std::os::unix::fs::symlink;

    let tmp = tempfile::tempdir().unwrap();
    let tmp_path = tmp.path().canonicalize().unwrap();
    let dir = model_folder(&tmp_path);
    std::fs::write(tmp_path.join("secret.txt"), b"not for you").unwrap();
    std::fs::create_dir(tmp_path.join("outside")).unwrap();
    std::fs::write(tmp_path.join("outside/secret.txt"), b"not for you").unwrap();
    std::fs::create_dir(dir.join("nested")).unwrap();
    std::fs::write(dir.join("nested/inner.bin"), b"inner bytes").unwrap();

    // Leading out of the folder: relative, absolute, through a symlinked folder, to a system
    // file.
    symlink("../secret.txt", dir.join("relative-escape.txt")).unwrap();
    symlink(tmp_path.join("secret.txt"), dir.join("absolute-escape.txt")).unwrap();
    symlink(tmp_path.join("outside"), dir.join("outside-dir")).unwrap();
    symlink("/etc/passwd", dir.join("passwd")).unwrap();
    // Broken: dangling, a loop.
    symlink("missing.bin", dir.join("dangling")).unwrap();
    symlink("loop", dir.join("loop")).unwrap();
    // Not regular files: a FIFO (opening it would wait for a writer), a folder, a symlink to
    // one.
    let fifo = Command::new("mkfifo")
        .arg(dir.join("fifo"))
        .status()
        .unwrap();
    assert!(fifo.success());
    symlink("nested", dir.join("nested-link")).unwrap();
    // Staying inside: served.
    symlink("manifest.json", dir.join("alias.json")).unwrap();
    symlink(dir.join("nested/inner.bin"), dir.join("absolute-alias.bin")).unwrap();
    symlink("../model/nested/inner.bin", dir.join("out-and-back.bin")).unwrap();

    // The folder is named through a symlink too: its resolved path is the boundary.
    let served = tmp_path.join("served");
    symlink(&dir, &served).unwrap();
    let server = Server::start(&[served.to_str().unwrap()]);
    let a = server.addr.clone();

    for path in [
        "/relative-escape.txt",
        "/absolute-escape.txt",
        "/outside-dir/secret.txt",
        "/passwd",
        "/dangling",
        "/loop",
        "/fifo",
        "/nested",
        "/nested-link",
        "/",
    ] {
        for method in ["GET", "HEAD"] {
            let r = request(&a, method, path, &[("Range", "bytes=0-")]);
            assert_eq!(r.status, 404, "{method} {path}: {r:?}");
            let body = String::from_utf8_lossy(&r.body);
            assert!(
                !body.contains("not for you") && !body.contains("root:"),
                "{path}: {body}"
            );
        }
    }

    let manifest = std::fs::read(dir.join("manifest.json")).unwrap();
    let r = get(&a, "/alias.json", &[]);
    assert_eq!((r.status, &r.body), (200, &manifest));
    assert_eq!(r.header("content-type"), Some("application/json"));
    for path in [
        "/nested/inner.bin",
        "/nested-link/inner.bin",
        "/absolute-alias.bin",
        "/out-and-back.bin",
    ] {
        let r = get(&a, path, &[("Range", "bytes=0-4")]);
        assert_eq!((r.status, &r.body[..]), (206, &b"inner"[..]), "{path}");
    }
    server.stop();
}

/// Header timeout 2 s, idle timeout 0.5 s: different enough that which one closed a
/// connection shows in when it closed. Closing times are checked from below with 0.1 s of
/// slack (the server's clock starts before the test's, timers fire no earlier than due) and
/// from above with 1.5 s (a loaded machine may run the server's timer late; the other timeout
/// still has to be told apart).
#[test]
fn slow_headers_and_idle_connections_are_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = model_folder(tmp.path());
    let server = Server::start(&[
        dir.to_str().unwrap(),
        "--header-timeout",
        "2",
        "--idle-timeout",
        "0.5",
    ]);
    let a = server.addr.clone();

    // A header sent a byte every 100 ms: each byte keeps the idle timeout away, the header
    // timeout ends it.
    let mut slow = TcpStream::connect(&a).unwrap();
    let start = Instant::now();
    let text = format!("GET /manifest.json HTTP/1.1\r\nHost: {a}\r\nX-Slow: ");
    let mut bytes = text.bytes().chain(std::iter::repeat(b'a')).take(100);
    let closed = loop {
        let Some(byte) = bytes.next() else {
            panic!("a slow header is still read after 10 s");
        };
        if slow.write_all(&[byte]).is_err()
            || closed_within(&mut slow, Duration::from_millis(100)).is_some()
        {
            break start.elapsed();
        }
    };
    assert!(
        closed >= Duration::from_millis(1900) && closed <= Duration::from_millis(3500),
        "{closed:?}"
    );

    // A connection opened and never used: the idle timeout.
    let mut silent = TcpStream::connect(&a).unwrap();
    let closed = closed_within(&mut silent, Duration::from_secs(10)).expect("closed");
    assert!(
        closed >= Duration::from_millis(400) && closed < Duration::from_millis(1900),
        "{closed:?}"
    );

    // Keep-alive: a second request within the idle timeout is served on the same connection
    // (traffic restarts the clock), then the idle connection is closed.
    let mut kept = TcpStream::connect(&a).unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    for _ in 0..2 {
        kept.write_all(request_text(&a, "GET", "/manifest.json", &[], true).as_bytes())
            .unwrap();
        assert_eq!(read_reply(&mut kept).status, 200);
        std::thread::sleep(Duration::from_millis(300));
    }
    let closed = closed_within(&mut kept, Duration::from_secs(10)).expect("closed")
        + Duration::from_millis(300);
    assert!(
        closed >= Duration::from_millis(400) && closed < Duration::from_millis(1900),
        "{closed:?}"
    );
    server.stop();
}

/// A client that stops reading its response is cut off by the send timeout (1.5 s), and one
/// that pauses for less than that is not, even for longer than the idle timeout (0.25 s): the
/// idle timeout applies only between requests. The timeout counts time in which the server can
/// write nothing, which starts once the socket buffers are full: the file, 48 MiB, is far more
/// than those hold while nobody reads (a few MiB), and the pausing client drains them (8 MiB
/// per read) between pauses of 0.6 s, so the server's writes never stall much longer than
/// that.
#[test]
fn a_client_that_stops_reading_is_cut_off() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = model_folder(tmp.path());
    let big: Vec<u8> = (0..48u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("big.bin"), &big).unwrap();
    let server = Server::start(&[
        dir.to_str().unwrap(),
        "--idle-timeout",
        "0.25",
        "--send-timeout",
        "1.5",
    ]);
    let a = server.addr.clone();
    let text = request_text(&a, "GET", "/big.bin", &[], false);

    let mut s = TcpStream::connect(&a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(text.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 8 << 20];
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(600));
        s.read_exact(&mut chunk).unwrap();
        raw.extend_from_slice(&chunk);
    }
    s.read_to_end(&mut raw).unwrap();
    let r = parse_reply(&raw);
    assert_eq!(r.status, 200);
    assert!(r.body == big, "{} of {} bytes", r.body.len(), big.len());

    // Not reading for 3.5 s: the server gives up 1.5 s after its writes stall; what it had
    // written still arrives, then the end of the stream, short of the whole file.
    let mut s = TcpStream::connect(&a).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(text.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(
        raw.len() < big.len(),
        "{} bytes of a {}-byte file arrived",
        raw.len(),
        big.len()
    );
    server.stop();
}

/// `--max-connections 2`: two connections that send nothing hold both places, a third is
/// connected (the kernel queues it) but not answered; when one of the two closes, the third
/// is served. The timeouts (10 s) are far longer than the test, so no connection is closed by
/// them meanwhile; 0.7 s without an answer is far longer than a loopback answer takes.
#[test]
fn connections_beyond_the_limit_wait_their_turn() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = model_folder(tmp.path());
    let server = Server::start(&[
        dir.to_str().unwrap(),
        "--max-connections",
        "2",
        "--idle-timeout",
        "10",
        "--header-timeout",
        "10",
    ]);
    let a = server.addr.clone();
    // The server is answering before the limit is reached.
    assert_eq!(get(&a, "/manifest.json", &[]).status, 200);

    let first = TcpStream::connect(&a).unwrap();
    let _second = TcpStream::connect(&a).unwrap();
    let mut third = TcpStream::connect(&a).unwrap();
    third
        .write_all(request_text(&a, "GET", "/manifest.json", &[], false).as_bytes())
        .unwrap();
    third
        .set_read_timeout(Some(Duration::from_millis(700)))
        .unwrap();
    let mut byte = [0u8; 1];
    match third.read(&mut byte) {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        other => panic!("the third connection was answered: {other:?}"),
    }

    drop(first);
    let start = Instant::now();
    third
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut raw = Vec::new();
    third.read_to_end(&mut raw).unwrap();
    assert_eq!(parse_reply(&raw).status, 200);
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    server.stop();
}
