//! A Nix binary cache over loopback HTTP, for tests: serves a directory
//! (GET, HEAD), which is also a `file://` cache, and accepts uploads into
//! it (PUT, as Nix's `nix copy --to http://...` sends them). An upload can
//! be refused on purpose ([`CacheServer::refuse`]), to cut a push midway.
//!
//! HTTP/1.1 with one request per connection (`Connection: close`), which
//! Nix's curl handles; enough for a test, not a web server.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};

/// A running server (its thread ends with the test process).
pub struct CacheServer {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The directory served.
    pub dir: PathBuf,
    refused: Arc<Mutex<BTreeSet<String>>>,
    uploads: Arc<Mutex<Vec<String>>>,
}

struct Shared {
    dir: PathBuf,
    refused: Arc<Mutex<BTreeSet<String>>>,
    uploads: Arc<Mutex<Vec<String>>>,
}

impl CacheServer {
    /// Serves `dir` (created if missing) on a free loopback port.
    pub fn start(dir: &Path) -> Result<CacheServer> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let listener = TcpListener::bind("127.0.0.1:0").context("binding a loopback port")?;
        let url = format!("http://{}", listener.local_addr()?);
        let refused = Arc::new(Mutex::new(BTreeSet::new()));
        let uploads = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            refused: refused.clone(),
            uploads: uploads.clone(),
        });
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let shared = shared.clone();
                std::thread::spawn(move || {
                    if let Err(err) = serve(stream, &shared) {
                        eprintln!("cache server: {err:#}");
                    }
                });
            }
        });
        Ok(CacheServer {
            url,
            dir: dir.to_path_buf(),
            refused,
            uploads,
        })
    }

    /// Answers `403 Forbidden` to uploads of `name` (a path in the cache,
    /// such as `<hash>.narinfo`) until [`CacheServer::accept_all`].
    pub fn refuse(&self, name: &str) {
        lock(&self.refused).insert(name.to_owned());
    }

    pub fn accept_all(&self) {
        lock(&self.refused).clear();
    }

    /// The names uploaded so far (accepted ones), in order.
    pub fn uploads(&self) -> Vec<String> {
        lock(&self.uploads).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One request: method, path, headers; then the answer.
fn serve(stream: TcpStream, shared: &Shared) -> Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut words = line.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let mut length = 0usize;
    let mut expect_continue = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((&header, ""));
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "expect" => expect_continue = value.trim().eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
    }
    let mut out = stream;
    let Some(name) = cache_name(target) else {
        return respond(&mut out, "400 Bad Request", method, &[]);
    };
    match method {
        "GET" | "HEAD" => match std::fs::read(shared.dir.join(&name)) {
            Ok(body) => respond(&mut out, "200 OK", method, &body),
            Err(_) => respond(&mut out, "404 Not Found", method, &[]),
        },
        "PUT" => {
            if lock(&shared.refused).contains(&name) {
                // A body already on its way is read, so the client sees the
                // answer rather than a reset connection.
                if !expect_continue {
                    std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink())?;
                }
                return respond(&mut out, "403 Forbidden", method, &[]);
            }
            if expect_continue {
                out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            let file = shared.dir.join(&name);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&file, &body)?;
            lock(&shared.uploads).push(name);
            respond(&mut out, "200 OK", method, &[])
        }
        other => bail!("unexpected method {other}"),
    }
}

/// The file a request path names inside the cache: no `..`, no query.
fn cache_name(target: &str) -> Option<String> {
    let path = target.split('?').next()?.trim_start_matches('/');
    let safe = !path.is_empty() && path.split('/').all(|part| !part.is_empty() && part != "..");
    safe.then(|| path.to_owned())
}

fn respond(out: &mut TcpStream, status: &str, method: &str, body: &[u8]) -> Result<()> {
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    if method != "HEAD" {
        out.write_all(body)?;
    }
    out.flush()?;
    Ok(())
}
