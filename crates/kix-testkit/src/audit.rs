//! Reads the apiserver's audit log (checks/control-plane enables it, metadata
//! level, every request) so tests can count the requests a command made.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::PathBuf;

use anyhow::{Context, Result};

/// One audited request, as much of it as tests look at.
#[derive(Debug, Clone)]
pub struct Request {
    pub verb: String,
    pub user_agent: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub dry_run: bool,
    /// The path and query the client sent.
    pub uri: String,
}

impl Request {
    /// A later page of a LIST (it carries the continue token of the one
    /// before): part of one LIST, not another.
    pub fn is_next_page(&self) -> bool {
        self.verb == "list" && self.uri.contains("continue=")
    }

    /// A request that may change state (dry-runs excluded).
    pub fn is_write(&self) -> bool {
        !self.dry_run
            && matches!(
                self.verb.as_str(),
                "create" | "update" | "patch" | "delete" | "deletecollection"
            )
    }
}

pub fn audit_log_path() -> PathBuf {
    super::control_plane_dir().join("audit.log")
}

/// A position in the audit log; requests after it are read with `since`.
#[derive(Debug, Clone, Copy)]
pub struct Mark(u64);

pub fn mark() -> Result<Mark> {
    let len = std::fs::metadata(audit_log_path())
        .context("reading the audit log's size")?
        .len();
    Ok(Mark(len))
}

/// Every request logged after `mark` (ResponseComplete stage only, so each
/// request counts once).
pub fn since(mark: Mark) -> Result<Vec<Request>> {
    let mut file = std::fs::File::open(audit_log_path()).context("opening the audit log")?;
    file.seek(SeekFrom::Start(mark.0))?;
    let mut requests = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" {
            continue;
        }
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let uri = event["requestURI"].as_str().unwrap_or_default();
        requests.push(Request {
            verb: text(&event["verb"]).unwrap_or_default(),
            user_agent: text(&event["userAgent"]).unwrap_or_default(),
            resource: text(&event["objectRef"]["resource"]).unwrap_or_default(),
            namespace: text(&event["objectRef"]["namespace"]),
            name: text(&event["objectRef"]["name"]),
            dry_run: uri.contains("dryRun=All"),
            uri: uri.to_string(),
        });
    }
    Ok(requests)
}
