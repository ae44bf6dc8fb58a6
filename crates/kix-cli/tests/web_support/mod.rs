//! `kix ui` as a process for the web view's tests, and plain HTTP GETs of
//! its pages (what a browser without JavaScript gets).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `kix ui` on a free loopback port (killed when dropped).
pub struct Ui {
    child: Child,
    pub addr: SocketAddr,
    /// What it printed first: its URL.
    pub banner: String,
}

impl Ui {
    /// `kix ui --listen 127.0.0.1:0` with `kubeconfig`, plus `extra` global
    /// flags; returns once it printed its URL.
    pub fn start(kubeconfig: &Path, extra: &[&str]) -> Ui {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kix"))
            .env_remove("KIX_LOG")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(extra)
            .args(["ui", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("kix ui starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut banner = String::new();
        BufReader::new(stdout)
            .read_line(&mut banner)
            .expect("kix ui prints its URL");
        let addr = banner
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no URL in {banner:?}"));
        Ui {
            child,
            addr,
            banner,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// GET `path` with the Host a browser sends.
    pub fn get(&self, path: &str) -> Page {
        self.get_as(path, &self.addr.to_string())
    }

    /// GET `path` with header `Host: host`.
    pub fn get_as(&self, path: &str, host: &str) -> Page {
        let started = Instant::now();
        let mut socket = TcpStream::connect(self.addr).expect("connect to kix ui");
        socket
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("timeout");
        write!(socket, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").expect("request");
        let mut first = [0u8; 1];
        socket.read_exact(&mut first).expect("a first byte");
        let first_byte = started.elapsed();
        let mut rest = Vec::new();
        socket.read_to_end(&mut rest).expect("the response");
        let mut bytes = first.to_vec();
        bytes.extend(rest);
        let text = String::from_utf8(bytes).expect("UTF-8");
        let (head, body) = text.split_once("\r\n\r\n").expect("head and body");
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        Page {
            status,
            head: head.to_string(),
            body: body.to_string(),
            first_byte,
        }
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A page as served.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub head: String,
    pub body: String,
    pub first_byte: Duration,
}

impl Page {
    /// The page, asserting it was served 200 as HTML.
    pub fn ok(self) -> Page {
        assert_eq!(self.status, 200, "{}\n{}", self.head, self.body);
        assert!(
            self.head
                .to_ascii_lowercase()
                .contains("content-type: text/html"),
            "{}",
            self.head
        );
        assert!(self.body.trim_end().ends_with("</html>"), "{}", self.body);
        self
    }

    /// The `<tr>` element whose attribute `attr` is `value`.
    pub fn row(&self, attr: &str, value: &str) -> &str {
        let start = self
            .body
            .find(&format!("<tr {attr}=\"{value}\""))
            .unwrap_or_else(|| panic!("no row {attr}={value} in {}", self.body));
        let end = self.body[start..]
            .find("</tr>")
            .map_or(self.body.len(), |e| start + e);
        &self.body[start..end]
    }
}
