//! A loopback TCP proxy in front of the API server that can stop forwarding, so a test can
//! make every request of one client hang, as a partitioned or wedged API server would, or
//! go down, so that connections are cut and new ones refused, as a stopped API server's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Proxy {
    pub port: u16,
    frozen: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn wait_while(frozen: &AtomicBool) {
    while frozen.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Copies bytes one way; while frozen, holds them (and reads no more); once down, closes.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        wait_while(&frozen).await;
        if down.load(Ordering::SeqCst) {
            break;
        }
        // Reading is cancel-safe: a read cut short to look at `down` loses nothing.
        let n = match tokio::time::timeout(Duration::from_millis(50), from.read(&mut buffer)).await {
            Err(_) => continue,
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => n,
        };
        wait_while(&frozen).await;
        if to.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

impl Proxy {
    /// Forwards a free loopback port to `upstream` (host:port).
    pub async fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let frozen = Arc::new(AtomicBool::new(false));
        let down = Arc::new(AtomicBool::new(false));
        let (shared, shared_down) = (frozen.clone(), down.clone());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                if shared_down.load(Ordering::SeqCst) {
                    // Refused: closed at once, as by a host with no server on the port.
                    drop(client);
                    continue;
                }
                let (upstream, frozen, down) = (upstream.clone(), shared.clone(), shared_down.clone());
                connections.spawn(async move {
                    wait_while(&frozen).await;
                    let Ok(server) = TcpStream::connect(&upstream).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pipe(client_read, server_write, frozen.clone(), down.clone()),
                        pipe(server_read, client_write, frozen, down)
                    );
                });
            }
        });
        Proxy { port, frozen, down, task }
    }

    /// Stops forwarding: every request through the proxy, old connection or new, hangs.
    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    pub fn thaw(&self) {
        self.frozen.store(false, Ordering::SeqCst);
    }

    /// The API server goes down for this client: open connections are cut, new ones closed.
    pub fn go_down(&self) {
        self.down.store(true, Ordering::SeqCst);
    }

    pub fn come_back(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}
