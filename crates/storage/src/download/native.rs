//! The native [`HttpClient`]: reqwest (rustls with ring) on tokio.

use std::time::Duration;

use bytes::Bytes;

use super::http::{HttpBody, HttpClient, HttpError, HttpErrorKind, HttpResponse, ResponseHeaders};

/// reqwest with connect and read timeouts (a stalled server becomes a retried error).
#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
}

impl ReqwestClient {
    /// A client with a 30 s connect timeout and a 60 s limit between body bytes.
    pub fn new() -> Result<ReqwestClient, HttpError> {
        Self::with_timeouts(Duration::from_secs(30), Duration::from_secs(60))
    }

    pub fn with_timeouts(connect: Duration, read: Duration) -> Result<ReqwestClient, HttpError> {
        // reqwest is built without a default TLS crypto provider; ring is ours. Installing
        // fails only when one is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .read_timeout(read)
            .user_agent(concat!("tritium/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| HttpError {
                kind: HttpErrorKind::InvalidUrl,
                message: format!("cannot start the HTTP client: {e}"),
            })?;
        Ok(ReqwestClient { client })
    }
}

/// The error and its causes on one line (reqwest's own message is terse).
fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

fn classify(e: &reqwest::Error) -> HttpError {
    let kind = if e.is_builder() {
        HttpErrorKind::InvalidUrl
    } else {
        HttpErrorKind::Network
    };
    HttpError {
        kind,
        message: describe(e),
    }
}

/// A reqwest response body.
pub struct ReqwestBody(reqwest::Response);

impl HttpBody for ReqwestBody {
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        self.0.chunk().await.map_err(|e| classify(&e))
    }
}

impl HttpClient for ReqwestClient {
    type Body = ReqwestBody;

    async fn get(
        &self,
        url: &str,
        range_from: Option<u64>,
    ) -> Result<HttpResponse<ReqwestBody>, HttpError> {
        let mut request = self.client.get(url);
        if let Some(from) = range_from {
            request = request.header(reqwest::header::RANGE, format!("bytes={from}-"));
        }
        let response = request.send().await.map_err(|e| classify(&e))?;
        let header = |name: reqwest::header::HeaderName| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let headers = ResponseHeaders {
            content_length: header(reqwest::header::CONTENT_LENGTH).and_then(|v| v.parse().ok()),
            content_range: header(reqwest::header::CONTENT_RANGE),
            accept_ranges: header(reqwest::header::ACCEPT_RANGES),
            etag: header(reqwest::header::ETAG),
        };
        Ok(HttpResponse {
            status: response.status().as_u16(),
            headers,
            body: ReqwestBody(response),
        })
    }

    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
}
