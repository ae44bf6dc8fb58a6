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
            let Some(request) = read_request_line(&mut socket).await else {
                return;
            };
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

/// The request line, read until its end: a client may send the request in
/// pieces (answering the first piece alone closed the connection under the
/// rest, and the client saw a broken pipe). None after 5 s or 8 KiB without
/// a line's end, or when the client goes away.
async fn read_request_line(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut request = Vec::new();
    let read = async {
        let mut buf = [0u8; 1024];
        while !request.contains(&b'\n') && request.len() < 8192 {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        request.contains(&b'\n')
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), read).await {
        Ok(true) => Some(String::from_utf8_lossy(&request).into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    /// A request sent in pieces, the way `write!` sends one, is answered
    /// whole, however long the pieces are apart.
    #[test]
    fn a_request_in_pieces_is_answered() {
        let metrics = std::sync::Arc::new(crate::metrics::Metrics::default());
        let addr = super::serve_on_own_thread("127.0.0.1:0".parse().expect("addr"), metrics)
            .expect("serve");
        let mut socket = std::net::TcpStream::connect(addr).expect("connect");
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        for piece in ["GET ", "/healthz", " HTTP/1.0\r\n", "\r\n"] {
            socket
                .write_all(piece.as_bytes())
                .expect("the server reads on");
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut response = String::new();
        socket.read_to_string(&mut response).expect("response");
        assert!(response.starts_with("HTTP/1.0 200 OK"), "{response}");
        assert!(response.ends_with("ok\n"), "{response}");
    }
}
