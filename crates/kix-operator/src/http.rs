//! The metrics and health endpoints: /metrics, /healthz, /readyz. A minimal
//! HTTP/1.0 responder: one request per connection, GET only. It runs on a
//! thread and runtime of its own, so a probe is answered even while every
//! reconcile worker is busy (judging a team's expensive health rule, say).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::metrics::Metrics;

/// Binds `addr` and serves on a thread of its own; the address bound.
pub fn serve_on_own_thread(
    addr: std::net::SocketAddr,
    metrics: Arc<Metrics>,
) -> std::io::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("kix-http".to_owned())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, metrics).await,
                    Err(error) => tracing::error!(%error, "serving /healthz"),
                }
            })
        })?;
    Ok(bound)
}

async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let n = match tokio::time::timeout(
                std::time::Duration::from_secs(5),
                socket.read(&mut buf),
            )
            .await
            {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, body) = match path {
                "/metrics" => ("200 OK", metrics.render()),
                "/healthz" | "/livez" => ("200 OK", "ok\n".to_string()),
                // Ready once the client works; a non-leader replica is ready too
                // (it stands by).
                "/readyz" if metrics.ready.load(Ordering::Relaxed) => {
                    ("200 OK", "ok\n".to_string())
                }
                "/readyz" => ("503 Service Unavailable", "starting\n".to_string()),
                _ => ("404 Not Found", "not found\n".to_string()),
            };
            let response = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        });
    }
}
