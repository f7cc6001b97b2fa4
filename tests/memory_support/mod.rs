//! The real `tritium` binary run as a child process, its peak resident memory measured: the
//! child's `ru_maxrss` from `wait4` (Linux), under an address-space limit
//! ([`ADDRESS_SPACE_LIMIT`]) so that a regression fails cleanly instead of filling the
//! machine's memory.

#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The children's address-space limit: far above what any command here needs (the tokio and
/// rayon thread stacks and malloc arenas reserve a few hundred MiB), far below the claims.
pub const ADDRESS_SPACE_LIMIT: u64 = 16 << 30;

pub struct Outcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident set size, bytes.
    pub peak: u64,
}

impl Outcome {
    pub fn text(&self) -> String {
        format!(
            "exit {:?}, signal {:?}\nstdout: {}\nstderr: {}",
            self.code,
            self.signal,
            &self.stdout[..self.stdout.len().min(2000)],
            &self.stderr[..self.stderr.len().min(2000)]
        )
    }
}

/// Run the binary with `args`, its store in `store`, and reap it with `wait4` for its peak RSS.
///
/// A forked child starts with the parent's resident pages counted as its own (and keeps that
/// high-water mark through `exec`), so the parent returns its free memory to the system first
/// and never holds the hostile folders in memory: their files are written as they are made.
pub fn tritium(args: &[&str], store: &Path) -> Outcome {
    // SAFETY: glibc's malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tritium"));
    cmd.args(args)
        .env("TRITIUM_STORE", store)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE_LIMIT,
                rlim_max: ADDRESS_SPACE_LIMIT,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // Reaped below with `wait4`, which `wait` cannot give the rusage of.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().expect("runs");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let read_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        out.read_to_end(&mut s).unwrap();
        String::from_utf8_lossy(&s).into_owned()
    });
    let read_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        err.read_to_end(&mut s).unwrap();
        String::from_utf8_lossy(&s).into_owned()
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: plain out-parameters; the child is ours and reaped here, once (std's `Child`
    // is not waited on afterwards).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    Outcome {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        stdout: read_out.join().unwrap(),
        stderr: read_err.join().unwrap(),
        // Linux reports kibibytes.
        peak: usage.ru_maxrss as u64 * 1024,
    }
}
