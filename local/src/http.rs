//! Loopback HTTP/1.1 servers: the Runtime API emulator, the API Gateway front and the tests'
//! stand-ins for AWS endpoints all accept connections and read bodies the same way.

use std::convert::Infallible;
use std::future::Future;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// A complete response.
pub type Reply = Response<Full<Bytes>>;

/// Answers every request on every connection of `listener` with `handle`, until accepting
/// fails. Each connection runs on its own task.
pub async fn serve<H, Fut>(listener: TcpListener, handle: H)
where
    H: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    while let Ok((stream, _)) = listener.accept().await {
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let reply = handle(request);
                async move { Ok::<_, Infallible>(reply.await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The request's whole body; empty when it cannot be read.
pub async fn body(request: Request<Incoming>) -> Bytes {
    request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default()
}
