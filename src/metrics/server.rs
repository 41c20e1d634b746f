//! The HTTP server for `/metrics`, `/healthz` and `/readyz` that the scheduler and the node
//! agent share, and the scheduler's read-only page at `/ui`. What healthy and ready mean is
//! the caller's: a [`Probes`]; the page is a [`Page`]; who may read is [`MetricsServer`].

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

use super::access::{MetricsServer, UiAccess, Verdict, check};

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

/// A page served at `/ui`: HTML rendered from what the process already knows, never
/// fetched from elsewhere on request.
pub trait Page: Send + Sync + 'static {
    fn html(&self) -> String;
}

/// What the server serves beside the metrics and the probes, and to whom.
#[derive(Clone, Default)]
pub struct Site {
    /// The page at `/ui`; None: `/ui` is not found (the node agent has none).
    pub page: Option<Arc<dyn Page>>,
    pub access: MetricsServer,
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
    serve_site(listener, registry, probes, Site::default(), shutdown).await
}

/// [`serve_listener`] with the page and the access rules of `site`.
pub async fn serve_site(
    listener: TcpListener,
    registry: Registry,
    probes: Arc<dyn Probes>,
    site: Site,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let site = Arc::new(site);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            accepted = listener.accept() => {
                let (stream, _) = accepted.map_err(Error::Accept)?;
                let (registry, probes, site) = (registry.clone(), probes.clone(), site.clone());
                let service = hyper::service::service_fn(move |request| {
                    let response = respond(&request, &registry, probes.as_ref(), &site);
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

fn respond<B>(request: &Request<B>, registry: &Registry, probes: &dyn Probes, site: &Site) -> Response<Full<Bytes>> {
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
    let path = request.uri().path();
    let page = site.page.as_ref().filter(|_| site.access.ui != UiAccess::Off);
    let guarded = path == "/metrics" || (path == "/ui" && page.is_some() && site.access.ui == UiAccess::Protected);
    if guarded {
        let header = request.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes());
        match check(&site.access, header) {
            Verdict::Allowed => {}
            Verdict::Refused => {
                let mut refused = reply(
                    StatusCode::UNAUTHORIZED,
                    "text/plain",
                    format!("{path} needs Authorization: Bearer <token>\n"),
                );
                refused.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer realm=\"muster\""),
                );
                return refused;
            }
            Verdict::Broken(why) => {
                tracing::warn!(%path, "refused: {why}");
                return reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", format!("{why}\n"));
            }
        }
    }
    match (path, page) {
        ("/metrics", _) => reply(StatusCode::OK, "text/plain; version=0.0.4", super::render(registry)),
        ("/healthz" | "/livez", _) => probe(probes.healthy()),
        ("/readyz", _) => probe(probes.ready()),
        ("/ui" | "/ui/", Some(page)) => {
            let mut html = reply(StatusCode::OK, "text/html; charset=utf-8", page.html());
            let headers = html.headers_mut();
            headers.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
            // Nothing is loaded from elsewhere and nothing runs: say so to the browser.
            headers.insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                hyper::header::HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; img-src data:"),
            );
            html
        }
        (_, Some(_)) => {
            reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /ui, /metrics, /healthz or /readyz\n".into())
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /metrics, /healthz or /readyz\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(port: u16, path: &str) -> String {
        get_with(port, path, "").await
    }

    async fn get_with(port: u16, path: &str, headers: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n");
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

    struct Hello;

    impl Page for Hello {
        fn html(&self) -> String {
            "<p>hello</p>".into()
        }
    }

    /// Serves a registry, always-ready probes and the `Hello` page under `access`; the port.
    async fn site(access: MetricsServer) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (_, ready) = watch::channel(true);
        let site = Site { page: Some(Arc::new(Hello)), access };
        tokio::spawn(serve_site(listener, Registry::new(), Arc::new(ready), site, std::future::pending()));
        port
    }

    #[tokio::test]
    async fn with_a_token_metrics_and_the_page_need_it_and_the_probes_stay_open() {
        let dir = std::env::temp_dir().join(format!("muster-metrics-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\n").unwrap();
        let file_name = file.display().to_string();
        let port = site(MetricsServer { bearer_token_file: file_name.clone(), ui: UiAccess::Protected }).await;
        let refused = get(port, "/metrics").await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(refused.contains("www-authenticate: Bearer"), "{refused}");
        assert!(get_with(port, "/metrics", "Authorization: Bearer wrong\r\n").await.starts_with("HTTP/1.1 401"));
        assert!(get_with(port, "/metrics", "Authorization: Bearer s3cret\r\n").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/ui").await.starts_with("HTTP/1.1 401"));
        let page = get_with(port, "/ui", "Authorization: Bearer s3cret\r\n").await;
        assert!(page.starts_with("HTTP/1.1 200") && page.contains("<p>hello</p>"), "{page}");
        assert!(page.contains("content-type: text/html"), "{page}");
        assert!(get(port, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(port, "/readyz").await.starts_with("HTTP/1.1 200"));

        // A rotated token takes effect at once.
        std::fs::write(&file, "rotated").unwrap();
        assert!(get_with(port, "/metrics", "Authorization: Bearer s3cret\r\n").await.starts_with("HTTP/1.1 401"));
        assert!(get_with(port, "/metrics", "Authorization: Bearer rotated\r\n").await.starts_with("HTTP/1.1 200"));

        // The page left open: no token asked there, still asked for /metrics.
        let open = site(MetricsServer { bearer_token_file: file_name.clone(), ui: UiAccess::Open }).await;
        assert!(get(open, "/ui").await.starts_with("HTTP/1.1 200"));
        assert!(get(open, "/metrics").await.starts_with("HTTP/1.1 401"));
        let off = site(MetricsServer { bearer_token_file: String::new(), ui: UiAccess::Off }).await;
        assert!(get(off, "/ui").await.starts_with("HTTP/1.1 404"));
        assert!(get(off, "/metrics").await.starts_with("HTTP/1.1 200"));

        // A token file gone: nobody gets in, and the answer says why.
        std::fs::remove_dir_all(&dir).unwrap();
        let broken = get_with(port, "/metrics", "Authorization: Bearer rotated\r\n").await;
        assert!(broken.starts_with("HTTP/1.1 503"), "{broken}");
        assert!(broken.contains(&format!("failed to read metricsServer.bearerTokenFile {file_name}")), "{broken}");
        assert!(get(port, "/healthz").await.starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn without_a_page_ui_is_not_found() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (_, ready) = watch::channel(true);
        tokio::spawn(serve_listener(listener, Registry::new(), Arc::new(ready), std::future::pending()));
        assert!(get(port, "/ui").await.starts_with("HTTP/1.1 404"));
    }
}
