//! The HTTP server for `/metrics`, `/healthz` and `/readyz` that the scheduler and the node
//! agent share. What healthy and ready mean is the caller's: a [`Probes`].

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use prometheus::Registry;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Debug, Error)]
pub enum Error {
    #[error("failed to listen for metrics on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error("failed to accept a metrics connection: {0}")]
    Accept(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What `/healthz` and `/readyz` answer: Ok, or why not, in words.
pub trait Probes: Send + Sync + 'static {
    fn healthy(&self) -> Result<(), String>;
    fn ready(&self) -> Result<(), String>;
}

/// Healthy while the process serves; ready once the flag holds true (the node agent's rule).
impl Probes for watch::Receiver<bool> {
    fn healthy(&self) -> Result<(), String> {
        Ok(())
    }

    fn ready(&self) -> Result<(), String> {
        if *self.borrow() { Ok(()) } else { Err("not ready".into()) }
    }
}

/// Serves `/metrics` (the registry), `/healthz` and `/readyz` (as `probes` says) on `addr`,
/// until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    registry: Registry,
    probes: Arc<dyn Probes>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let listener = TcpListener::bind(addr).await.map_err(|source| Error::Listen { addr, source })?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    serve_listener(listener, registry, probes, shutdown).await
}

/// [`serve`] on a listener already bound (tests bind port 0 and read the port back).
pub async fn serve_listener(
    listener: TcpListener,
    registry: Registry,
    probes: Arc<dyn Probes>,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => {
                let (stream, _) = accepted.map_err(Error::Accept)?;
                let (registry, probes) = (registry.clone(), probes.clone());
                let service = hyper::service::service_fn(move |request| {
                    let response = respond(&request, &registry, probes.as_ref());
                    async move { Ok::<_, Infallible>(response) }
                });
                connections.spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await {
                        tracing::debug!(error = %e, "metrics connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

fn respond<B>(request: &Request<B>, registry: &Registry, probes: &dyn Probes) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    let probe = |result: Result<(), String>| match result {
        Ok(()) => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        Err(why) => reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{why}\n")),
    };
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "only GET\n".into());
    }
    match request.uri().path() {
        "/metrics" => reply(StatusCode::OK, "text/plain; version=0.0.4", super::render(registry)),
        "/healthz" | "/livez" => probe(probes.healthy()),
        "/readyz" => probe(probes.ready()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /metrics, /healthz or /readyz\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(port: u16, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn the_server_serves_metrics_health_and_readiness_until_shut_down() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let metrics = super::super::Metrics::new();
        metrics.pending_gangs.set(3);
        let (ready_tx, ready_rx) = watch::channel(false);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_listener(listener, metrics.registry.clone(), Arc::new(ready_rx), async {
            let _ = stop_rx.await;
        }));
        let scraped = get(port, "/metrics").await;
        assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
        assert!(scraped.contains("muster_pending_gangs 3"), "{scraped}");
        assert!(get(port, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/readyz").await.starts_with("HTTP/1.1 503"));
        ready_tx.send_replace(true);
        assert!(get(port, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/nothing").await.starts_with("HTTP/1.1 404"));
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
