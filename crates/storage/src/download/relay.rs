//! What crosses between a browser download and the workers that fetch its shards
//! ([`worker_fetch`](super::worker_fetch)): the job (a shard to fetch, write and hash), the
//! events and errors that come back. Plain data, JSON on the wire, so it is tested natively.
#![cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::local::LocalStream;
use super::{DownloadError, DownloadEvent, RetryPolicy};
use crate::formats::rdrr::HashAlgorithm;
use crate::store::StoreError;

/// One shard for a fetch worker: [`fetch::FileJob`](super::fetch::FileJob) and what of the
/// download's options it needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    pub model: String,
    pub file: String,
    pub what: String,
    pub index: usize,
    pub count: usize,
    pub urls: Vec<String>,
    pub size: Option<u64>,
    /// `sha256` or `blake3`.
    pub algorithm: String,
    pub expected: Option<String>,
    pub retry_attempts: u32,
    pub retry_initial_ms: u64,
    pub retry_max_ms: u64,
    pub read_chunk: usize,
    /// Send the bytes back as they stream (the download checks group hashes on them).
    pub observe: bool,
    /// Group streams the worker hashes itself (see `local.rs`).
    #[serde(default)]
    pub local: Vec<LocalStream>,
    /// With `observe`: only the bytes in these ranges (offset, length) go back; `None`: all.
    #[serde(default)]
    pub wanted: Option<Vec<(u64, u64)>>,
}

impl JobSpec {
    pub(crate) fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            attempts: self.retry_attempts,
            initial_delay: Duration::from_millis(self.retry_initial_ms),
            max_delay: Duration::from_millis(self.retry_max_ms),
        }
    }

    pub(crate) fn hash_algorithm(&self) -> Result<HashAlgorithm, DownloadError> {
        HashAlgorithm::parse(&self.algorithm).ok_or_else(|| {
            DownloadError::Hashing(format!("unknown hash algorithm {:?}", self.algorithm))
        })
    }
}

/// A fetched shard: its hash (not yet compared by the download) and length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDone {
    pub hash: String,
    pub len: u64,
    /// The digests of the job's local streams: (stream, digest).
    #[serde(default)]
    pub local: Vec<(usize, String)>,
}

/// A worker's byte counts for its job so far: received over the network, and present and
/// hashed (which falls when bytes are discarded).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counts {
    pub fetched: u64,
    pub done: u64,
}

/// The events of a job the download passes on (progress goes as [`Counts`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum JobEvent {
    FileStarted {
        file: String,
        index: usize,
        count: usize,
        from: u64,
    },
    Retrying {
        url: String,
        failures: u32,
        delay_ms: u64,
        reason: String,
    },
    Restarting {
        file: String,
        reason: String,
    },
}

impl JobEvent {
    /// The events a worker passes on; `None` for the rest (progress).
    pub(crate) fn from_event(e: &DownloadEvent) -> Option<JobEvent> {
        Some(match e {
            DownloadEvent::FileStarted {
                file,
                index,
                count,
                from,
            } => JobEvent::FileStarted {
                file: file.clone(),
                index: *index,
                count: *count,
                from: *from,
            },
            DownloadEvent::Retrying {
                url,
                failures,
                delay,
                reason,
            } => JobEvent::Retrying {
                url: url.clone(),
                failures: *failures,
                delay_ms: delay.as_millis() as u64,
                reason: reason.clone(),
            },
            DownloadEvent::Restarting { file, reason } => JobEvent::Restarting {
                file: file.clone(),
                reason: reason.clone(),
            },
            _ => return None,
        })
    }

    pub(crate) fn into_event(self) -> DownloadEvent {
        match self {
            JobEvent::FileStarted {
                file,
                index,
                count,
                from,
            } => DownloadEvent::FileStarted {
                file,
                index,
                count,
                from,
            },
            JobEvent::Retrying {
                url,
                failures,
                delay_ms,
                reason,
            } => DownloadEvent::Retrying {
                url,
                failures,
                delay: Duration::from_millis(delay_ms),
                reason,
            },
            JobEvent::Restarting { file, reason } => DownloadEvent::Restarting { file, reason },
        }
    }
}

/// A job's failure, as the download reports it (so a worker's hash mismatch is the same error,
/// with the same fields, as one found in the download's own thread).
/// Externally tagged (`{"Status":{...}}`): an internally tagged enum costs the wasm package far
/// more code to read.
#[derive(Debug, Serialize, Deserialize)]
pub enum JobError {
    Network {
        url: String,
        message: String,
        failures: u32,
    },
    Status {
        url: String,
        status: u16,
    },
    Protocol {
        url: String,
        message: String,
    },
    HashMismatch {
        what: String,
        algorithm: String,
        expected: String,
        actual: String,
        url: String,
        attempts: u32,
    },
    TooLarge {
        url: String,
        max: u64,
    },
    Quota {
        needed: u64,
        available: u64,
    },
    /// A [`StoreError`]: its variant's name and its two fields (one for `NoRoot`).
    Store {
        variant: String,
        a: String,
        b: String,
    },
    /// Anything else, by its message.
    Other {
        message: String,
    },
}

impl From<DownloadError> for JobError {
    fn from(e: DownloadError) -> JobError {
        match e {
            DownloadError::Network {
                url,
                message,
                failures,
            } => JobError::Network {
                url,
                message,
                failures,
            },
            DownloadError::Status { url, status } => JobError::Status { url, status },
            DownloadError::Protocol { url, message } => JobError::Protocol { url, message },
            DownloadError::HashMismatch {
                what,
                algorithm,
                expected,
                actual,
                url,
                attempts,
            } => JobError::HashMismatch {
                what,
                algorithm: algorithm.to_string(),
                expected,
                actual,
                url,
                attempts,
            },
            DownloadError::TooLarge { url, max } => JobError::TooLarge { url, max },
            DownloadError::Quota { needed, available } => JobError::Quota { needed, available },
            DownloadError::Store(error) => {
                let (variant, a, b) = match error {
                    StoreError::BadName { name, why } => ("BadName", name, why),
                    StoreError::NotFound { name, why } => ("NotFound", name, why),
                    StoreError::Io { path, message } => ("Io", path, message),
                    StoreError::Corrupt { path, message } => ("Corrupt", path, message),
                    StoreError::NoRoot(why) => ("NoRoot", why, String::new()),
                    // Native only (a model argument); never crosses to a worker.
                    StoreError::Unresolved { arg, tried } => ("NotFound", arg, tried.join("; ")),
                };
                JobError::Store {
                    variant: variant.to_string(),
                    a,
                    b,
                }
            }
            e => JobError::Other {
                message: e.to_string(),
            },
        }
    }
}

impl From<JobError> for DownloadError {
    fn from(e: JobError) -> DownloadError {
        match e {
            JobError::Network {
                url,
                message,
                failures,
            } => DownloadError::Network {
                url,
                message,
                failures,
            },
            JobError::Status { url, status } => DownloadError::Status { url, status },
            JobError::Protocol { url, message } => DownloadError::Protocol { url, message },
            JobError::HashMismatch {
                what,
                algorithm,
                expected,
                actual,
                url,
                attempts,
            } => DownloadError::HashMismatch {
                what,
                algorithm: HashAlgorithm::parse(&algorithm)
                    .map_or("hash", HashAlgorithm::display_name),
                expected,
                actual,
                url,
                attempts,
            },
            JobError::TooLarge { url, max } => DownloadError::TooLarge { url, max },
            JobError::Quota { needed, available } => DownloadError::Quota { needed, available },
            JobError::Store { variant, a, b } => DownloadError::Store(match variant.as_str() {
                "BadName" => StoreError::BadName { name: a, why: b },
                "NotFound" => StoreError::NotFound { name: a, why: b },
                "Corrupt" => StoreError::Corrupt {
                    path: a,
                    message: b,
                },
                "NoRoot" => StoreError::NoRoot(a),
                _ => StoreError::Io {
                    path: a,
                    message: b,
                },
            }),
            JobError::Other { message } => DownloadError::Worker(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: DownloadError) -> DownloadError {
        let json = serde_json::to_string(&JobError::from(e)).unwrap();
        DownloadError::from(serde_json::from_str::<JobError>(&json).unwrap())
    }

    #[test]
    fn errors_cross_with_their_fields() {
        let e = round_trip(DownloadError::HashMismatch {
            what: "shard 3 (shard_00003.bin)".into(),
            algorithm: "BLAKE3",
            expected: "aa".into(),
            actual: "bb".into(),
            url: "http://h/m/shard_00003.bin".into(),
            attempts: 2,
        });
        assert!(
            matches!(&e, DownloadError::HashMismatch { algorithm: "BLAKE3", attempts: 2, what, .. }
                if what == "shard 3 (shard_00003.bin)"),
            "{e:?}"
        );
        let e = round_trip(DownloadError::Status {
            url: "u".into(),
            status: 404,
        });
        assert!(matches!(e, DownloadError::Status { status: 404, .. }));
        let e = round_trip(DownloadError::Store(StoreError::Io {
            path: "p".into(),
            message: "QuotaExceededError: full".into(),
        }));
        assert!(
            matches!(&e, DownloadError::Store(StoreError::Io { message, .. }) if message.starts_with("QuotaExceededError"))
        );
        let e = round_trip(DownloadError::Hashing("boom".into()));
        assert_eq!(e.to_string(), "fetch worker: hashing: boom");
    }

    #[test]
    fn events_cross() {
        let e = DownloadEvent::Retrying {
            url: "u".into(),
            failures: 2,
            delay: Duration::from_millis(1500),
            reason: "HTTP 503".into(),
        };
        let j = JobEvent::from_event(&e).unwrap();
        let back: JobEvent = serde_json::from_str(&serde_json::to_string(&j).unwrap()).unwrap();
        assert_eq!(back.into_event(), e);
        assert!(JobEvent::from_event(&DownloadEvent::GroupsChecked {
            streamed: 1,
            read_back: 0,
            read_back_bytes: 0
        })
        .is_none());
    }
}
