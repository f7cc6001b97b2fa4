//! The browser's [`HttpClient`]: `fetch`, one `AbortController` per request, the body read
//! chunk by chunk (so a shard is hashed and written as it streams, and never held whole), and
//! `setTimeout` for the backoff between retries. The body is read with a BYOB reader into one
//! buffer that each read hands back, where the browser's fetch bodies are byte streams
//! (Chromium's are), else with the default reader, which makes a new buffer for every chunk.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{select, Either};
use js_sys::{Array, ArrayBuffer, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    AbortController, Headers, ReadableStream, ReadableStreamByobReader,
    ReadableStreamDefaultReader, Request, RequestCache, RequestInit, Response,
};

use crate::storage::download::{
    HttpBody, HttpClient, HttpError, HttpErrorKind, HttpResponse, ResponseHeaders,
};
use crate::storage::opfs::error_text;

/// `fetch` with a limit on the wait for the response headers and between body chunks (a
/// stalled server becomes a network error, which the downloader retries).
#[derive(Debug, Clone)]
pub struct FetchClient {
    pub connect_timeout: Duration,
    pub read_timeout: Duration,
}

impl Default for FetchClient {
    /// 30 s for the headers, 60 s between chunks (as the native client).
    fn default() -> Self {
        FetchClient {
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
        }
    }
}

/// A `setTimeout` timer as a future; dropping it clears the timer.
struct Delay {
    promise: JsFuture,
    id: Option<JsValue>,
}

impl Delay {
    fn new(duration: Duration) -> Delay {
        let ms = duration.as_millis().min(i32::MAX as u128) as i32;
        let mut id = None;
        let promise = Promise::new(&mut |resolve, _reject| {
            let global = js_sys::global();
            let set_timeout = Reflect::get(&global, &"setTimeout".into())
                .ok()
                .and_then(|f| f.dyn_into::<Function>().ok());
            id = set_timeout.and_then(|f| f.call2(&global, &resolve, &ms.into()).ok());
            if id.is_none() {
                let _ = resolve.call0(&JsValue::NULL);
            }
        });
        Delay {
            promise: JsFuture::from(promise),
            id,
        }
    }
}

impl std::future::Future for Delay {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        std::pin::Pin::new(&mut self.promise).poll(cx).map(|_| {
            self.id = None;
        })
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let global = js_sys::global();
            if let Ok(clear) =
                Reflect::get(&global, &"clearTimeout".into()).and_then(|f| f.dyn_into::<Function>())
            {
                let _ = clear.call1(&global, &id);
            }
        }
    }
}

/// Resolves after `duration` (`setTimeout` on the window or worker global).
pub async fn sleep(duration: Duration) {
    Delay::new(duration).await;
}

/// `future`, or a network error when it takes longer than `limit`.
async fn within(future: JsFuture, limit: Duration, what: &str) -> Result<JsValue, HttpError> {
    match select(future, Delay::new(limit)).await {
        Either::Left((result, _)) => result.map_err(|e| HttpError::network(error_text(&e))),
        Either::Right(_) => Err(HttpError::network(format!(
            "no {what} for {} s",
            limit.as_secs()
        ))),
    }
}

/// Aborts its request when dropped, unless disarmed (the request was handed on).
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.abort();
        }
    }
}

/// The global `fetch` (window or worker).
fn global_fetch(request: &Request) -> Result<Promise, JsValue> {
    let global = js_sys::global();
    let fetch: Function = Reflect::get(&global, &"fetch".into())?.dyn_into()?;
    fetch.call1(&global, request)?.dyn_into()
}

/// Bytes a BYOB read asks for at most (each read hands back what has arrived, up to this).
const READ_BUFFER: u32 = 1 << 20;

/// How a body is read.
enum Reader {
    /// Into `buffer`, which each read takes and hands back (`None` while a read holds it).
    Byob {
        reader: ReadableStreamByobReader,
        buffer: Option<ArrayBuffer>,
    },
    Default(ReadableStreamDefaultReader),
}

impl Reader {
    /// A BYOB reader where `stream` is a byte stream, else the default reader. `getReader` is
    /// called through `Reflect::apply` so that a browser whose bodies are not byte streams
    /// (its TypeError) falls back instead of throwing through wasm.
    fn new(stream: &ReadableStream) -> Result<Reader, HttpError> {
        let byob = (|| {
            let get_reader: Function = Reflect::get(stream, &"getReader".into())?.dyn_into()?;
            let options = Object::new();
            Reflect::set(&options, &"mode".into(), &"byob".into())?;
            Reflect::apply(&get_reader, stream, &Array::of1(&options))?
                .dyn_into::<ReadableStreamByobReader>()
        })();
        Ok(match byob {
            Ok(reader) => Reader::Byob {
                reader,
                buffer: Some(ArrayBuffer::new(READ_BUFFER)),
            },
            Err(_) => Reader::Default(
                stream
                    .get_reader()
                    .dyn_into::<ReadableStreamDefaultReader>()
                    .map_err(|_| HttpError::network("the response body has no reader"))?,
            ),
        })
    }

    fn cancel(&self) -> Promise {
        match self {
            Reader::Byob { reader, .. } => reader.cancel(),
            Reader::Default(reader) => reader.cancel(),
        }
    }
}

/// A `fetch` response body. Dropping it cancels the reader and aborts the request.
pub struct FetchBody {
    reader: Option<Reader>,
    /// Held for its `Drop`: aborts the request with the body.
    _abort: AbortOnDrop,
    read_timeout: Duration,
}

impl HttpBody for FetchBody {
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        let promise = match &mut self.reader {
            None => return Ok(None),
            Some(Reader::Default(reader)) => reader.read(),
            Some(Reader::Byob { reader, buffer }) => {
                let Some(into) = buffer.take() else {
                    return Err(HttpError::network(
                        "the read buffer was not handed back by the last read",
                    ));
                };
                reader.read_with_array_buffer_view(&Uint8Array::new(&into))
            }
        };
        let result = within(JsFuture::from(promise), self.read_timeout, "data").await?;
        let value = Reflect::get(&result, &"value".into())
            .map_err(|e| HttpError::network(error_text(&e)))?;
        if Reflect::get(&result, &"done".into()).is_ok_and(|d| d.is_truthy()) {
            self.reader = None;
            return Ok(None);
        }
        let chunk: Uint8Array = value
            .dyn_into()
            .map_err(|_| HttpError::network("the response body gave something other than bytes"))?;
        if let Some(Reader::Byob { buffer, .. }) = &mut self.reader {
            *buffer = Some(chunk.buffer());
        }
        // The one copy: from the browser's buffer into wasm memory.
        Ok(Some(Bytes::from(chunk.to_vec())))
    }
}

impl Drop for FetchBody {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            // Awaited by nobody; JsFuture keeps a rejection from going unhandled.
            drop(JsFuture::from(reader.cancel()));
        }
    }
}

impl HttpClient for FetchClient {
    type Body = FetchBody;

    async fn get(
        &self,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<HttpResponse<FetchBody>, HttpError> {
        let invalid = |e: JsValue| HttpError {
            kind: HttpErrorKind::InvalidUrl,
            message: format!("{url}: {}", error_text(&e)),
        };
        let controller = AbortController::new().map_err(invalid)?;
        let abort = AbortOnDrop(Some(controller.clone()));
        let init = RequestInit::new();
        init.set_method("GET");
        init.set_signal(Some(&controller.signal()));
        // Shards go to OPFS, not into the HTTP cache too (and a cached 200 must never answer a
        // Range request).
        init.set_cache(RequestCache::NoStore);
        if let Some(from) = range_from {
            let headers = Headers::new().map_err(invalid)?;
            headers
                .set("Range", &format!("bytes={from}-"))
                .map_err(invalid)?;
            init.set_headers(&headers);
        }
        let request = Request::new_with_str_and_init(url, &init).map_err(invalid)?;
        let promise = global_fetch(&request).map_err(invalid)?;
        let response: Response = within(JsFuture::from(promise), self.connect_timeout, "response")
            .await?
            .dyn_into()
            .map_err(|_| HttpError::network("fetch resolved to something other than a Response"))?;
        let h = response.headers();
        let header = |name: &str| h.get(name).ok().flatten();
        let headers = ResponseHeaders {
            content_length: header("content-length").and_then(|v| v.trim().parse().ok()),
            content_range: header("content-range"),
            accept_ranges: header("accept-ranges"),
            etag: header("etag"),
        };
        let reader = match response.body() {
            Some(stream) => Some(Reader::new(&stream)?),
            None => None,
        };
        Ok(HttpResponse {
            status: response.status(),
            headers,
            body: FetchBody {
                reader,
                _abort: abort,
                read_timeout: self.read_timeout,
            },
        })
    }

    async fn sleep(&self, duration: Duration) {
        sleep(duration).await;
    }
}
