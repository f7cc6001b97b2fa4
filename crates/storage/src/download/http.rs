//! The HTTP the downloader needs: one `GET`, perhaps with a `Range: bytes=N-` header, whose body
//! arrives in chunks. Natively [`ReqwestClient`](super::ReqwestClient) implements it; in the
//! browser, `fetch` does (an `AbortController` per request, the body read through
//! `response.body.getReader()`, `setTimeout` for [`HttpClient::sleep`]).

use std::time::Duration;

use bytes::Bytes;

/// Why a request failed before a status arrived, or while its body streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpErrorKind {
    /// Connection refused or dropped, timeout, body cut short: worth retrying.
    Network,
    /// The URL cannot be requested at all (malformed, unsupported scheme): not retried.
    InvalidUrl,
}

/// A failed request or body read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HttpError {
    pub kind: HttpErrorKind,
    pub message: String,
}

impl HttpError {
    /// A network error (retried).
    pub fn network(message: impl Into<String>) -> HttpError {
        HttpError {
            kind: HttpErrorKind::Network,
            message: message.into(),
        }
    }
}

/// The response headers the downloader reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseHeaders {
    pub content_length: Option<u64>,
    /// `Content-Range` as sent (`bytes 100-999/1000`).
    pub content_range: Option<String>,
    /// `Accept-Ranges` as sent (`bytes`, `none`).
    pub accept_ranges: Option<String>,
    pub etag: Option<String>,
}

/// A response whose status and headers have arrived; the body follows through `body`.
pub struct HttpResponse<B> {
    pub status: u16,
    pub headers: ResponseHeaders,
    pub body: B,
}

/// A response body, read a chunk at a time. Dropping it abandons the rest (the browser client
/// cancels its reader and aborts the request).
#[allow(async_fn_in_trait)]
pub trait HttpBody {
    /// The next chunk, or `None` at the end of a body that arrived whole. A body cut short
    /// (connection dropped, fewer bytes than `Content-Length`) is an error of kind
    /// [`HttpErrorKind::Network`].
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError>;
}

/// An HTTP client and a timer: all the downloader needs from the platform. Futures need not be
/// `Send` (the browser's are not).
#[allow(async_fn_in_trait)]
pub trait HttpClient {
    type Body: HttpBody;

    /// `GET url`, with `Range: bytes={from}-` when `range_from` is given. Any status is a
    /// response (the downloader judges it); only failures to get one are errors.
    async fn get(
        &self,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<HttpResponse<Self::Body>, HttpError>;

    /// Wait `duration` (between retries).
    async fn sleep(&self, duration: Duration);
}

/// A parsed `Content-Range: bytes START-END/TOTAL` (`TOTAL` may be `*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentRange {
    pub start: u64,
    /// Inclusive.
    pub end: u64,
    pub total: Option<u64>,
}

/// Parse a `Content-Range` header of a 206 response; `None` when it is not one.
pub fn parse_content_range(value: &str) -> Option<ContentRange> {
    let rest = value.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.trim().split_once('-')?;
    let start: u64 = start.trim().parse().ok()?;
    let end: u64 = end.trim().parse().ok()?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    if end < start || total.is_some_and(|t| end >= t) {
        return None;
    }
    Some(ContentRange { start, end, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(
            parse_content_range("bytes 100-999/1000"),
            Some(ContentRange {
                start: 100,
                end: 999,
                total: Some(1000)
            })
        );
        assert_eq!(
            parse_content_range("bytes 0-0/*"),
            Some(ContentRange {
                start: 0,
                end: 0,
                total: None
            })
        );
        for bad in [
            "",
            "bytes */1000",
            "bytes 5-4/10",
            "bytes 0-10/10",
            "items 0-1/2",
            "bytes a-b/c",
        ] {
            assert_eq!(parse_content_range(bad), None, "{bad:?}");
        }
    }
}
