//! [`OpfsWriter`]: appending to a partial file, through a sync access handle (dedicated
//! workers) or a writable stream (the main thread).

use std::cell::RefCell;
use std::collections::HashMap;

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::{future_to_promise, JsFuture};
use web_sys::{
    FileSystemFileHandle, FileSystemReadWriteOptions, FileSystemSyncAccessHandle,
    FileSystemWritableFileStream,
};

use super::js;
use super::js::io;
use crate::store::{ShardWriter, StoreError};

/// Bytes gathered before one `write()` on a writable stream: each write is a round trip to
/// the browser's storage process, so 64 KiB network chunks are batched.
const WRITE_BATCH: usize = 1 << 20;

thread_local! {
    /// Writers dropped unfinished close in the background (so what they wrote is kept); every
    /// store of this thread waits for those closes before it touches OPFS again (a download
    /// cancelled and resumed at once must see the bytes the cancelled one wrote).
    static CLOSING: RefCell<HashMap<u64, Promise>> = RefCell::default();
    static NEXT_WRITER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Wait until every writer dropped unfinished has closed.
pub(super) async fn settle() {
    loop {
        let pending: Vec<Promise> =
            CLOSING.with(|c| c.borrow_mut().drain().map(|(_, p)| p).collect());
        if pending.is_empty() {
            return;
        }
        for p in pending {
            let _ = js::wait(p).await;
        }
    }
}

/// How an [`OpfsWriter`] writes.
enum Sink {
    /// A writable stream (main thread): writes are gathered into [`WRITE_BATCH`]-byte pieces,
    /// one piece in flight while the next is gathered (and its bytes hashed).
    Stream {
        stream: FileSystemWritableFileStream,
        buffer: Vec<u8>,
        in_flight: Option<JsFuture>,
    },
    /// A sync access handle (dedicated worker): each write goes from wasm memory straight to
    /// the file, no copy and no round trip to another process.
    Sync {
        handle: FileSystemSyncAccessHandle,
        at: u64,
        options: FileSystemReadWriteOptions,
    },
}

/// A partial file being appended to. Dropped unfinished (a cancelled download), it keeps what
/// was written: a sync access handle is closed at once, a writable stream closes in the
/// background (and the store waits for that before touching OPFS again).
pub struct OpfsWriter {
    sink: Option<Sink>,
    path: String,
}

impl OpfsWriter {
    /// Open `handle` (the partial file `path`, for messages) for appending at its end, or
    /// emptied first with `truncate`; through a sync access handle when `sync`.
    pub(super) async fn open(
        handle: &FileSystemFileHandle,
        path: String,
        truncate: bool,
        sync: bool,
    ) -> Result<OpfsWriter, StoreError> {
        let sink = if sync {
            let sync: FileSystemSyncAccessHandle = js::wait(handle.create_sync_access_handle())
                .await
                .map_err(|e| io(&path, &e))?
                .unchecked_into();
            let at = if truncate {
                sync.truncate_with_f64(0.0).map(|()| 0)
            } else {
                sync.get_size().map(|n| n as u64)
            };
            match at {
                Ok(at) => Sink::Sync {
                    handle: sync,
                    at,
                    options: FileSystemReadWriteOptions::new(),
                },
                Err(e) => {
                    sync.close();
                    return Err(io(&path, &e));
                }
            }
        } else {
            let stream = js::writable(handle, !truncate)
                .await
                .map_err(|e| io(&path, &e))?;
            if !truncate {
                let end = js::file_size(handle).await.map_err(|e| io(&path, &e))?;
                let seek = stream
                    .seek_with_f64(end as f64)
                    .map_err(|e| io(&path, &e))?;
                if let Err(e) = js::wait(seek).await {
                    let _ = js::wait(stream.abort()).await;
                    return Err(io(&path, &e));
                }
            }
            Sink::Stream {
                stream,
                buffer: Vec::with_capacity(WRITE_BATCH + (64 << 10)),
                in_flight: None,
            }
        };
        Ok(OpfsWriter {
            sink: Some(sink),
            path,
        })
    }

    /// Send the gathered bytes of a stream writer on their way.
    async fn flush(&mut self) -> Result<(), StoreError> {
        let Some(Sink::Stream {
            stream,
            buffer,
            in_flight,
        }) = &mut self.sink
        else {
            return Ok(());
        };
        if let Some(write) = in_flight.take() {
            write.await.map_err(|e| io(&self.path, &e))?;
        }
        if buffer.is_empty() {
            return Ok(());
        }
        // A copy in JS memory: the stream reads its chunk later, and wasm memory moves.
        let chunk = Uint8Array::from(buffer.as_slice());
        buffer.clear();
        let write = stream
            .write_with_js_u8_array(&chunk)
            .map_err(|e| io(&self.path, &e))?;
        *in_flight = Some(JsFuture::from(write));
        Ok(())
    }
}

impl ShardWriter for OpfsWriter {
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        match &mut self.sink {
            Some(Sink::Stream { buffer, .. }) => {
                buffer.extend_from_slice(bytes);
                if buffer.len() >= WRITE_BATCH {
                    self.flush().await?;
                }
                Ok(())
            }
            Some(Sink::Sync {
                handle,
                at,
                options,
            }) => {
                let mut done = 0usize;
                while done < bytes.len() {
                    options.set_at(*at as f64);
                    let n = handle
                        .write_with_u8_array_and_options(&bytes[done..], options)
                        .map_err(|e| io(&self.path, &e))? as usize;
                    if n == 0 {
                        return Err(StoreError::Io {
                            path: self.path.clone(),
                            message: "the file accepted no more bytes".to_string(),
                        });
                    }
                    done += n;
                    *at += n as u64;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    async fn finish(mut self) -> Result<(), StoreError> {
        self.flush().await?;
        match self.sink.take() {
            Some(Sink::Stream {
                stream, in_flight, ..
            }) => {
                if let Some(write) = in_flight {
                    write.await.map_err(|e| io(&self.path, &e))?;
                }
                js::wait(stream.close())
                    .await
                    .map_err(|e| io(&self.path, &e))?;
            }
            Some(Sink::Sync { handle, .. }) => {
                let flushed = handle.flush();
                handle.close();
                flushed.map_err(|e| io(&self.path, &e))?;
            }
            None => {}
        }
        Ok(())
    }
}

impl Drop for OpfsWriter {
    fn drop(&mut self) {
        match self.sink.take() {
            Some(Sink::Sync { handle, .. }) => {
                let _ = handle.flush();
                handle.close();
            }
            Some(Sink::Stream {
                stream,
                buffer,
                in_flight,
            }) => {
                let closed = future_to_promise(async move {
                    if let Some(write) = in_flight {
                        let _ = write.await;
                    }
                    if !buffer.is_empty() {
                        let chunk = Uint8Array::from(buffer.as_slice());
                        if let Ok(write) = stream.write_with_js_u8_array(&chunk) {
                            let _ = js::wait(write).await;
                        }
                    }
                    let _ = js::wait(stream.close()).await;
                    Ok(JsValue::UNDEFINED)
                });
                let id = NEXT_WRITER.with(|n| {
                    let id = n.get();
                    n.set(id + 1);
                    id
                });
                CLOSING.with(|c| c.borrow_mut().insert(id, closed));
            }
            None => {}
        }
    }
}
