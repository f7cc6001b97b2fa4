//! `tritium pull | list | rm`: the native model store.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::human_bytes;
use crate::cli::Error;
use crate::storage::download::{
    self as download, DownloadEvent, DownloadOptions, DownloadSummary, ReqwestClient, RetryPolicy,
};
use crate::storage::{model_name_from_url, FsStore, ShardStore};

/// `--store DIR`, for every command that reads the model store.
#[derive(Args, Debug, Clone, Default)]
pub struct StoreArgs {
    /// The model store folder (default: $TRITIUM_STORE, else the user cache folder's `tritium`).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
}

impl StoreArgs {
    /// The store these arguments name.
    pub fn open(&self) -> Result<FsStore, Error> {
        Ok(FsStore::open_default(self.store.as_deref())?)
    }

    /// A model argument as a path: an existing file or folder, else a model in the store.
    pub fn resolve(&self, model: &str) -> Result<PathBuf, Error> {
        Ok(crate::storage::resolve_model(model, self.store.as_deref())?)
    }

    /// [`StoreArgs::resolve`] for a path argument (one that is not UTF-8 can only be a path).
    pub fn resolve_path(&self, model: &Path) -> Result<PathBuf, Error> {
        match model.to_str() {
            Some(name) => self.resolve(name),
            None => Ok(model.to_path_buf()),
        }
    }
}

#[derive(Args, Debug)]
pub struct PullArgs {
    /// An RDRR model's folder URL (or its manifest.json), or a GGUF file's URL.
    pub url: String,
    /// The name in the store (default: from the URL).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Files fetched at once (8: on a many-core host, enough for the download to keep up with
    /// one thread's plain hashing speed).
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// A base URL to fetch the shards from (repeatable; tried in order, the manifest still comes
    /// from URL).
    #[arg(long = "mirror", value_name = "URL")]
    pub mirrors: Vec<String>,
    /// The expected SHA-256 of a GGUF file (hex).
    #[arg(long, value_name = "HEX")]
    pub sha256: Option<String>,
    /// Failed attempts in a row before giving up on a file.
    #[arg(long, default_value_t = 6)]
    pub retries: u32,
    /// Skip the group hash checks (shard hashes are always checked).
    #[arg(long)]
    pub no_group_check: bool,
    /// Print the summary as JSON (and no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// A multi-threaded tokio runtime for the network commands: a worker per core, 2 to 8. The
/// workers receive the parallel shards and write them to the store (hashing has threads of
/// its own).
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    runtime_with(network_workers())
}

/// The worker threads of [`runtime`].
pub(crate) fn network_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    cores.clamp(2, 8)
}

/// A multi-threaded tokio runtime with `workers` worker threads.
pub(crate) fn runtime_with(workers: usize) -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| Error::Usage(format!("cannot start the async runtime: {e}")))
}

fn progress_bar(json: bool) -> ProgressBar {
    if json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template(
        "{msg:>12} [{bar:32.cyan/blue}] {bytes}/{total_bytes} {prefix}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

fn on_event(bar: &ProgressBar, event: &DownloadEvent) {
    match event {
        DownloadEvent::Planned {
            files,
            total_bytes,
            verified_files,
            verified_bytes,
        } => {
            bar.set_length(*total_bytes);
            bar.set_position(*verified_bytes);
            if *verified_files > 0 {
                bar.println(format!(
                    "resuming: {verified_files} of {files} shards ({}) already verified",
                    human_bytes(*verified_bytes)
                ));
            }
        }
        DownloadEvent::Progress(p) => {
            if p.total > 0 {
                bar.set_length(p.total);
            }
            bar.set_position(p.done);
            bar.set_message(format!("shard {}/{}", p.files_done, p.files_total));
            let eta = p
                .eta
                .map(|e| format!(", ETA {}", indicatif::HumanDuration(e)))
                .unwrap_or_default();
            bar.set_prefix(format!("{}/s{eta}", human_bytes(p.rate as u64)));
        }
        DownloadEvent::Retrying {
            url,
            failures,
            delay,
            reason,
        } => bar.println(format!(
            "retrying {url} in {delay:?} (failure {failures}: {reason})"
        )),
        DownloadEvent::Restarting { file, reason } => {
            bar.println(format!("{file}: starting over: {reason}"))
        }
        DownloadEvent::FileStarted { .. }
        | DownloadEvent::FileVerified { .. }
        | DownloadEvent::GroupsChecked { .. } => {}
    }
}

/// `tritium pull`.
pub fn pull(args: &PullArgs) -> Result<ExitCode, Error> {
    let name = match &args.name {
        Some(n) => n.clone(),
        None => model_name_from_url(&args.url).ok_or_else(|| {
            Error::Usage(format!(
                "cannot make a model name from {}: give one with --name",
                args.url
            ))
        })?,
    };
    let store = args.store.open()?;
    let options = DownloadOptions {
        parallel: args.parallel.max(1),
        mirrors: args.mirrors.clone(),
        retry: RetryPolicy {
            attempts: args.retries.max(1),
            ..RetryPolicy::default()
        },
        check_groups: !args.no_group_check,
        ..DownloadOptions::default()
    };
    let client = ReqwestClient::new().map_err(|e| Error::Usage(e.message))?;
    let bar = progress_bar(args.json);
    let events = |e: &DownloadEvent| on_event(&bar, e);
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let download = download::pull(
            &store,
            &client,
            &args.url,
            &name,
            args.sha256.as_deref(),
            &options,
            &events,
        );
        tokio::select! {
            result = download => Some(result),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    bar.finish_and_clear();
    let summary = match outcome {
        None => {
            let partial = rt.block_on(store.list_partial()).unwrap_or_default();
            let verified = partial
                .iter()
                .find(|p| p.name == name)
                .map_or(0, |p| p.verified.len());
            eprintln!(
                "interrupted: {verified} verified file(s) of {name:?} are kept in {}; run the same \
                 command again to resume",
                store.root().display()
            );
            return Ok(ExitCode::from(130));
        }
        Some(result) => result?,
    };
    report(&store, &summary, args.json)?;
    Ok(ExitCode::SUCCESS)
}

fn report(store: &FsStore, s: &DownloadSummary, json: bool) -> Result<(), Error> {
    let path = store
        .complete_path(&s.name)
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if json {
        let mut v = serde_json::to_value(s).map_err(|e| Error::Usage(e.to_string()))?;
        v["path"] = path.into();
        println!("{v}");
        return Ok(());
    }
    if s.already_present {
        println!(
            "{} is already in the store ({}, {}); `tritium rm {}` first to fetch it again",
            s.name,
            human_bytes(s.bytes),
            path,
            s.name
        );
        return Ok(());
    }
    let rate = if s.seconds > 0.0 {
        s.fetched_bytes as f64 / s.seconds
    } else {
        0.0
    };
    println!(
        "pulled {} ({}, {}): {} fetched in {:.1} s ({}/s), {} file(s) fetched, {} already verified",
        s.name,
        s.kind.as_str(),
        human_bytes(s.bytes),
        human_bytes(s.fetched_bytes),
        s.seconds,
        human_bytes(rate as u64),
        s.fetched_files,
        s.reused_files
    );
    if s.groups_checked > 0 {
        println!("group hashes checked: {}", s.groups_checked);
    }
    if let Some(sha) = &s.sha256 {
        println!("sha256: {sha}");
    }
    for w in &s.warnings {
        println!("warning: {w}");
    }
    println!("{path}");
    Ok(())
}

/// `tritium list`.
pub fn list(args: &StoreArgs, json: bool) -> Result<ExitCode, Error> {
    let store = args.open()?;
    let rt = runtime()?;
    let (models, partial, used) = rt.block_on(async {
        Ok::<_, Error>((
            store.list().await?,
            store.list_partial().await?,
            store.bytes_used().await?,
        ))
    })?;
    if json {
        let v = serde_json::json!({
            "store": store.root().display().to_string(),
            "models": models.iter().map(|m| serde_json::json!({
                "name": m.name,
                "format": m.kind.as_str(),
                "bytes": m.bytes,
                "shards": m.shards,
                "path": m.location,
            })).collect::<Vec<_>>(),
            "partial": partial.iter().map(|p| serde_json::json!({
                "name": p.name,
                "source": p.source,
                "bytes": p.bytes,
                "verified_files": p.verified.len(),
            })).collect::<Vec<_>>(),
            "bytes_used": used,
        });
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("store: {}", store.root().display());
    if models.is_empty() {
        println!("no models (fetch one with `tritium pull <url>`)");
    } else {
        let rows: Vec<[String; 5]> = models
            .iter()
            .map(|m| {
                [
                    m.name.clone(),
                    m.kind.as_str().to_string(),
                    human_bytes(m.bytes),
                    if m.shards > 0 {
                        m.shards.to_string()
                    } else {
                        "-".to_string()
                    },
                    m.location.clone(),
                ]
            })
            .collect();
        print_table(&["NAME", "FORMAT", "SIZE", "SHARDS", "PATH"], &rows);
    }
    if !partial.is_empty() {
        println!("incomplete downloads (`tritium pull` with the same URL resumes them):");
        for p in &partial {
            println!(
                "  {}  {} so far, {} file(s) verified  {}",
                p.name,
                human_bytes(p.bytes),
                p.verified.len(),
                p.source.as_deref().unwrap_or("")
            );
        }
    }
    println!("total: {}", human_bytes(used));
    Ok(ExitCode::SUCCESS)
}

pub(super) fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths = header.map(str::len);
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// `tritium rm`.
pub fn rm(args: &StoreArgs, name: &str, yes: bool) -> Result<ExitCode, Error> {
    crate::storage::check_model_name(name)?;
    let store = args.open()?;
    let rt = runtime()?;
    let (complete, partial) = rt.block_on(async {
        Ok::<_, Error>((store.get(name).await?, store.list_partial().await?))
    })?;
    let partial = partial.into_iter().find(|p| p.name == name);
    let what = match (&complete, &partial) {
        (Some(m), _) => format!(
            "model {name} ({}, {})",
            m.kind.as_str(),
            human_bytes(m.bytes)
        ),
        (None, Some(p)) => format!("incomplete download {name} ({})", human_bytes(p.bytes)),
        (None, None) => {
            return Err(Error::Usage(format!(
                "no model named {name:?} in the store {}",
                store.root().display()
            )))
        }
    };
    if !yes && !confirm(&what, store.root())? {
        println!("kept {what}");
        return Ok(ExitCode::FAILURE);
    }
    rt.block_on(store.delete(name))?;
    println!("removed {what}");
    Ok(ExitCode::SUCCESS)
}

/// Ask on the terminal; refuse when stdin is not one.
fn confirm(what: &str, root: &Path) -> Result<bool, Error> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Error::Usage(format!(
            "refusing to remove {what} without confirmation: stdin is not a terminal (pass -y)"
        )));
    }
    print!("remove {what} from {}? [y/N] ", root.display());
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    stdin
        .lock()
        .read_line(&mut line)
        .map_err(|e| Error::Usage(format!("cannot read the answer: {e}")))?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}
