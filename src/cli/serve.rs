//! `tritium serve | stop | ps | show`: the HTTP server's lifecycle on the command line.
//!
//! `serve` binds first (a port already taken fails at once, with a clear message), writes
//! `serve-<port>.json` (pid, address) into the store folder, loads the models it was given, then
//! prints its URL and serves until SIGTERM or Ctrl-C: then it stops accepting, lets requests in
//! flight finish up to `--drain-timeout`, removes the file and exits 0. `stop` sends SIGTERM to
//! the server that file names and waits for it to go; `ps` asks a running server what it has
//! loaded; `show` describes a model from its header.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};

use super::generate::EngineArgs;
use super::serve_model::connections;
use super::store::StoreArgs;
use crate::cli::Error;
use crate::server::metrics::Metrics;
use crate::server::models::{name_of_path, KeepAlive, Registry, RegistryConfig};

/// The environment variable a key can come from instead of `--api-key`.
pub const API_KEY_ENV: &str = "TRITIUM_API_KEY";

/// `tritium serve` arguments.
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Models to load now: GGUF files, RDRR folders or store names (a path is served under its
    /// file stem; past --max-loaded, they load when a request names them). Any model in the
    /// store is also loaded when a request names it.
    pub models: Vec<String>,
    /// The address to listen on (loopback by default; anything else without a key is
    /// reachable by anyone who can reach the machine).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port; 0 picks a free one (printed).
    #[arg(long, default_value_t = 11435)]
    pub port: u16,
    /// Require `Authorization: Bearer KEY` on every route but /health (also from
    /// $TRITIUM_API_KEY).
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// How each model is loaded (per model: context, batch, KV cache, arithmetic).
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Requests that may wait per model behind the one running; beyond it: 503 with
    /// Retry-After.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_queue: usize,
    /// A LoRA adapter loaded beside each model it fits (a GGUF adapter or an RDRR adapter
    /// folder), applied at SCALE (default 1) unless a request's `lora` field chooses:
    /// `[{"id": 0, "scale": 0.5}]` (llama-server's field; ids in `GET /lora-adapters`).
    /// Repeatable.
    #[arg(long = "lora", value_name = "ADAPTER[:SCALE]", value_parser = super::generate::parse_lora)]
    pub lora: Vec<super::generate::LoraArg>,
    /// An origin browsers may call the server from (repeatable; `*` for any). CORS preflights
    /// are answered before the key is checked.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// How long a model loaded on demand stays loaded after its last request (a request's
    /// `keep_alive` overrides it): seconds, or a duration such as 5m or 1h; negative: forever.
    /// Models named at start stay loaded until a request says otherwise.
    #[arg(long, default_value = "5m")]
    pub keep_alive: String,
    /// Most models loaded at once; loading another first unloads the one idle longest (0: no
    /// limit).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_loaded: usize,
    /// Most memory the loaded models may take (bytes, or with a unit: 8G, 512M), GPU memory
    /// on a GPU backend: a model's files' size until it is loaded, then what its backend
    /// allocated; loading past it first unloads idle models, longest idle first.
    #[arg(long, value_name = "SIZE")]
    pub max_memory: Option<String>,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, value_name = "BYTES", default_value_t = 8 << 20)]
    pub max_body: usize,
    /// Seconds requests in flight may take to finish after SIGTERM before the server exits.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub drain_timeout: u64,
    /// Connections served at once; further clients wait until one closes.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_connections: usize,
    /// Seconds a response may go without the server being able to send a byte (a client that
    /// stopped reading) or, for a queued request, without a byte to send.
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub send_timeout: u64,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// What `serve-<port>.json` in the store folder holds.
#[derive(Serialize, Deserialize, Debug, Clone)]
pub struct ServerFile {
    pub pid: u32,
    pub host: String,
    pub port: u16,
    pub url: String,
}

fn server_file_path(root: &Path, port: u16) -> PathBuf {
    root.join(format!("serve-{port}.json"))
}

/// The servers whose files are in the store folder.
fn server_files(root: &Path) -> Vec<(PathBuf, ServerFile)> {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, ServerFile)> = dir
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("serve-") && n.ends_with(".json"))
        })
        .filter_map(|p| {
            let f: ServerFile = serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
            Some((p, f))
        })
        .collect();
    out.sort_by_key(|(_, f)| f.port);
    out
}

/// Whether process `pid` exists.
#[cfg(unix)]
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // Signal 0: only the permission and existence checks.
    // SAFETY: kill has no memory effects; an invalid pid is reported through errno.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[cfg(not(unix))]
fn alive(_pid: u32) -> bool {
    true
}

/// The server a command means: the one on `port`, else the only one running.
fn find_server(store: &StoreArgs, port: Option<u16>) -> Result<(PathBuf, ServerFile), Error> {
    let root = crate::storage::store_root(store.store.as_deref())?;
    let mut running = Vec::new();
    for (path, f) in server_files(&root) {
        if alive(f.pid) {
            running.push((path, f));
        } else {
            // Left by a server that was killed.
            let _ = std::fs::remove_file(&path);
        }
    }
    if let Some(port) = port {
        return running
            .into_iter()
            .find(|(_, f)| f.port == port)
            .ok_or_else(|| {
                Error::Usage(format!(
                    "no tritium server on port {port} (no live serve-{port}.json in {})",
                    root.display()
                ))
            });
    }
    match running.len() {
        0 => Err(Error::Usage(format!(
            "no tritium server is running (no live serve-*.json in {})",
            root.display()
        ))),
        1 => Ok(running.remove(0)),
        _ => Err(Error::Usage(format!(
            "several servers are running (ports {}): name one with --port",
            running
                .iter()
                .map(|(_, f)| f.port.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Seconds, or a duration with units (`5m`, `1h30m`), as a keep-alive.
fn parse_keep_alive(s: &str) -> Result<KeepAlive, Error> {
    let v = serde_json::Value::String(s.to_string());
    crate::server::ollama_keep_alive(&v)
        .map_err(|e| Error::Usage(format!("--keep-alive: {}", e.message)))
}

/// `--max-memory`: bytes, or a whole number with a binary unit (K, M, G, T; `8G`, `512MiB`).
fn parse_size(s: &str) -> Result<u64, Error> {
    let bad = || {
        Error::Usage(format!(
            "--max-memory {s:?}: give bytes or a size such as 8G or 512M"
        ))
    };
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(bad)
}

/// The names and paths of the models given on the command line.
fn named_models(args: &ServeArgs) -> Result<BTreeMap<String, PathBuf>, Error> {
    let mut named = BTreeMap::new();
    for m in &args.models {
        let path = args.store.resolve(m)?;
        let name = if Path::new(m).exists() {
            name_of_path(&path)
        } else {
            m.clone()
        };
        if let Some(other) = named.insert(name.clone(), path.clone()) {
            if other != path {
                return Err(Error::Usage(format!(
                    "two models would be served as {name:?}: {} and {}",
                    other.display(),
                    path.display()
                )));
            }
        }
    }
    Ok(named)
}

/// `tritium serve`.
pub fn serve(args: &ServeArgs) -> Result<ExitCode, Error> {
    let api_key = args
        .api_key
        .clone()
        .or_else(|| std::env::var(API_KEY_ENV).ok())
        .filter(|k| !k.is_empty());
    let named = named_models(args)?;
    let keep_alive = parse_keep_alive(&args.keep_alive)?;
    let store_root = crate::storage::store_root(args.store.store.as_deref())?;
    let open = args.engine.open_options(Some(store_root.clone()));
    let metrics = Arc::new(Metrics::default());
    let registry = Registry::new(
        named.clone(),
        RegistryConfig {
            open,
            max_queue: args.max_queue,
            default_keep_alive: keep_alive,
            max_loaded: args.max_loaded,
            max_memory: args.max_memory.as_deref().map(parse_size).transpose()?,
            lora: args
                .lora
                .iter()
                .map(|l| (l.adapter.clone(), l.scale))
                .collect(),
        },
        Arc::clone(&metrics),
    );
    let app = crate::server::app(
        Arc::clone(&registry),
        metrics,
        api_key.as_deref(),
        args.max_body,
    );
    let router = crate::server::router(app, &args.cors_origins);
    let runtime = super::store::runtime_with(2)?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(&addr))
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::Usage(format!(
                "cannot listen on {addr}: the port is already in use (another `tritium serve`? \
                 `tritium stop --port {}` ends it), or pick another with --port",
                args.port
            ))
            } else {
                Error::Usage(format!("cannot listen on {addr}: {e}"))
            }
        })?;
    let local: SocketAddr = listener
        .local_addr()
        .map_err(|e| Error::Usage(format!("{addr}: {e}")))?;
    if !local.ip().is_loopback() && api_key.is_none() {
        eprintln!(
            "WARNING: listening on {local} without an API key: anyone who can reach this \
             address can use the models. Set --api-key or {API_KEY_ENV}, or bind 127.0.0.1."
        );
    }
    let host = if local.is_ipv6() {
        format!("[{}]", local.ip())
    } else {
        local.ip().to_string()
    };
    let url = format!("http://{host}:{}", local.port());
    let file = server_file_path(&store_root, local.port());
    std::fs::create_dir_all(&store_root).map_err(|e| Error::Io {
        path: store_root.display().to_string(),
        message: e.to_string(),
    })?;
    let record = ServerFile {
        pid: std::process::id(),
        host: host.clone(),
        port: local.port(),
        url: url.clone(),
    };
    std::fs::write(&file, serde_json::to_vec(&record).unwrap_or_default()).map_err(|e| {
        Error::Io {
            path: file.display().to_string(),
            message: e.to_string(),
        }
    })?;
    let _remove = RemoveOnDrop(file);
    // The models named at start, loaded before the URL is announced (as many as --max-loaded
    // allows; the others load when a request names them).
    let at_start = match args.max_loaded {
        0 => named.len(),
        n => n,
    };
    for name in named.keys().take(at_start) {
        let (_, mut rx) = registry
            .submit(name, None, None)
            .map_err(|e| Error::Usage(e.message))?;
        match rx.blocking_recv() {
            Some(crate::server::Event::Done(_)) => {}
            Some(crate::server::Event::Failed(e)) => return Err(Error::Usage(e.message)),
            _ => return Err(Error::Usage(format!("{name}: the model did not load"))),
        }
    }
    println!("tritium serve: listening on {url}/ (OpenAI: {url}/v1, Ollama: {url}/api)");
    let _ = std::io::stdout().flush();
    let limits = connections::Limits {
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(60),
        send_timeout: Duration::from_secs(args.send_timeout.max(1)),
        max_connections: args.max_connections.max(1),
    };
    let drain = Duration::from_secs(args.drain_timeout);
    let closing = Arc::clone(&registry);
    let (signalled, mut stopping) = tokio::sync::watch::channel(false);
    let shutdown = async move {
        wait_for_signal().await;
        eprintln!(
            "tritium serve: stopping: no new connections, {} request(s) in flight get up to {} s",
            closing.busy(),
            drain.as_secs()
        );
        closing.close();
        let _ = signalled.send(true);
    };
    runtime.block_on(async {
        let served = connections::serve(listener, router, limits, shutdown);
        // `serve` returns once the connections in flight are done; the drain deadline, from
        // the signal on, bounds that wait.
        let deadline = async {
            let _ = stopping.wait_for(|s| *s).await;
            tokio::time::sleep(drain).await;
        };
        tokio::select! {
            () = served => {}
            () = deadline => {
                eprintln!("tritium serve: drain deadline passed; closing the remaining connections");
            }
        }
    });
    // The runtime's connections are dropped with it; model threads end with the process.
    runtime.shutdown_timeout(Duration::from_millis(100));
    eprintln!("tritium serve: stopped");
    Ok(ExitCode::SUCCESS)
}

/// Deletes the server's file when the server ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// SIGTERM or Ctrl-C.
async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `tritium stop` arguments.
#[derive(Args, Clone, Debug)]
pub struct StopArgs {
    /// The server's port (needed only when several are running).
    #[arg(long)]
    pub port: Option<u16>,
    /// Seconds to wait for it to exit.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `tritium stop`.
pub fn stop(args: &StopArgs) -> Result<ExitCode, Error> {
    let (path, server) = find_server(&args.store, args.port)?;
    terminate(server.pid)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    // The server removes its file as it exits (its process may linger as a zombie until its
    // parent reaps it, so the file is the sign).
    while path.exists() && alive(server.pid) {
        if Instant::now() >= deadline {
            return Err(Error::Usage(format!(
                "the server (pid {}) on {} did not stop within {} s",
                server.pid, server.url, args.timeout
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    println!("stopped the server on {} (pid {})", server.url, server.pid);
    Ok(ExitCode::SUCCESS)
}

#[cfg(unix)]
fn terminate(pid: u32) -> Result<(), Error> {
    let p = libc::pid_t::try_from(pid)
        .map_err(|_| Error::Usage(format!("pid {pid} is out of range")))?;
    // SAFETY: kill has no memory effects; failure is reported through errno.
    if unsafe { libc::kill(p, libc::SIGTERM) } != 0 {
        return Err(Error::Usage(format!(
            "cannot signal pid {pid}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn terminate(_pid: u32) -> Result<(), Error> {
    Err(Error::Usage(
        "`tritium stop` needs Unix signals; stop the server with Ctrl-C".into(),
    ))
}

/// `tritium ps` arguments.
#[derive(Args, Clone, Debug)]
pub struct PsArgs {
    #[arg(long)]
    pub port: Option<u16>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// GET `path` from a local server, with the key from the environment; the body.
fn get_local(server: &ServerFile, path: &str) -> Result<String, Error> {
    let err = |e: std::io::Error| Error::Usage(format!("{}: {e}", server.url));
    let host = server.host.trim_start_matches('[').trim_end_matches(']');
    let mut tcp = TcpStream::connect((host, server.port)).map_err(err)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(err)?;
    let auth = std::env::var(API_KEY_ENV)
        .ok()
        .filter(|k| !k.is_empty())
        .map(|k| format!("Authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: {}:{}\r\n{auth}Connection: close\r\n\r\n",
        server.host, server.port
    )
    .map_err(err)?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).map_err(err)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(Error::Usage(format!(
            "{}{path}: HTTP {status}: {body} (a server with a key needs {API_KEY_ENV})",
            server.url
        )));
    }
    Ok(body.to_string())
}

/// `tritium ps`.
pub fn ps(args: &PsArgs) -> Result<ExitCode, Error> {
    let (_, server) = find_server(&args.store, args.port)?;
    let body = get_local(&server, "/api/ps")?;
    if args.json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| Error::Usage(format!("/api/ps: {e}")))?;
    println!("server: {} (pid {})", server.url, server.pid);
    let models = v["models"].as_array().cloned().unwrap_or_default();
    if models.is_empty() {
        println!("no models loaded");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 6]> = models
        .iter()
        .map(|m| {
            let s = |k: &str| m[k].as_str().unwrap_or("").to_string();
            [
                s("name"),
                super::human_bytes(m["size"].as_u64().unwrap_or(0)),
                s("backend"),
                m["context_length"].to_string(),
                m["queued"].to_string(),
                if m["expires_at"]
                    .as_str()
                    .is_some_and(|e| e.starts_with("9999"))
                {
                    "never".to_string()
                } else {
                    s("expires_at")
                },
            ]
        })
        .collect();
    super::store::print_table(
        &["NAME", "SIZE", "BACKEND", "CONTEXT", "QUEUED", "UNLOADS AT"],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

/// `tritium show` arguments.
#[derive(Args, Clone, Debug)]
pub struct ShowArgs {
    /// A GGUF file, an RDRR folder, or the name of a model in the store.
    pub model: String,
    #[arg(long)]
    pub json: bool,
    /// Also print the chat template.
    #[arg(long)]
    pub template: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `tritium show`.
pub fn show(args: &ShowArgs) -> Result<ExitCode, Error> {
    let path = args.store.resolve(&args.model)?;
    let d = crate::server::details::describe(&path).map_err(|e| Error::Lib(e).at(&path))?;
    if args.json {
        let mut v = serde_json::to_value(&d).map_err(|e| Error::Usage(e.to_string()))?;
        v["path"] = path.display().to_string().into();
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| Error::Usage(e.to_string()))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let or = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not stated)".into());
    println!("path:          {}", path.display());
    println!("format:        {}", d.format);
    println!("architecture:  {}", or(&d.architecture));
    println!("parameters:    {} ({})", d.parameter_size, d.parameters);
    println!("quantization:  {}", or(&d.quantization));
    println!(
        "context:       {}",
        d.context_length
            .map_or("(not stated)".into(), |c| c.to_string())
    );
    println!("license:       {}", or(&d.license));
    println!("tensor bytes:  {}", super::human_bytes(d.tensor_bytes));
    match (&d.template, args.template) {
        (Some(t), true) => println!("template:\n{t}"),
        (Some(t), false) => println!(
            "template:      {} characters (--template prints it)",
            t.chars().count()
        ),
        (None, _) => println!("template:      (none)"),
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("1000").unwrap(), 1000);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("8GB").unwrap(), 8 << 30);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("3k").unwrap(), 3 << 10);
        for bad in ["", "0", "G", "1.5G", "8X", "-1", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
