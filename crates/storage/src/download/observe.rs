//! What sees a downloaded file's bytes as they stream ([`StreamObserver`]): the group checks,
//! a GGUF's header check, or on a browser worker the link back to the download.

use bytes::Bytes;

use super::local::LocalPlan;
use super::DownloadError;

/// Sees a file's bytes as they stream (group hashing).
#[allow(async_fn_in_trait)]
pub(crate) trait StreamObserver {
    /// `data` is the file's bytes at `offset`, in order, each byte once per fetch from 0.
    async fn bytes(&self, offset: u64, data: &Bytes) -> Result<(), DownloadError>;
    /// What was seen of this file is void (it starts over, or did not verify).
    fn void(&self);

    /// Called before the file's bytes up to `end` are written: an error refuses them (a GGUF
    /// whose header says the file ends before).
    fn admit(&self, end: u64) -> Result<(), DownloadError> {
        let _ = end;
        Ok(())
    }

    /// For a browser worker fetching the file: the hash streams it may compute itself and the
    /// byte ranges (offset, length) that must still come here; `None`: every byte comes here.
    /// The streams are then this observer's to finish through [`local_done`](Self::local_done).
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    fn take_local(&self) -> Option<LocalPlan> {
        None
    }

    /// The digests the worker computed for [`take_local`](Self::take_local)'s streams.
    #[cfg_attr(not(all(target_arch = "wasm32", feature = "web")), allow(dead_code))]
    fn local_done(&self, digests: Vec<(usize, String)>) {
        let _ = digests;
    }
}
