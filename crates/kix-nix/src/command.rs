//! Running `nix` and `nix-store`: synchronous `std::process`, stderr captured
//! (and optionally streamed through), errors that name the command.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

use crate::NixError;

/// The `nix` program (new CLI).
pub(crate) const NIX: &str = "nix";
/// The `nix-store` program.
pub(crate) const NIX_STORE: &str = "nix-store";

/// Always passed to `nix`: kix uses `nix build` and flakes, which Nix 2.x
/// still calls experimental.
pub(crate) const EXPERIMENTAL: [&str; 2] = ["--extra-experimental-features", "nix-command flakes"];

/// What a finished command printed.
#[derive(Debug)]
pub(crate) struct Output {
    pub stdout: String,
    #[allow(dead_code)]
    pub stderr: String,
}

/// One command line, displayable for error messages.
#[derive(Debug, Clone)]
pub(crate) struct NixCommand {
    program: String,
    args: Vec<OsString>,
}

impl NixCommand {
    pub fn new(program: &str) -> Self {
        NixCommand {
            program: program.to_owned(),
            args: Vec::new(),
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The command line as a shell would read it.
    pub fn display(&self) -> String {
        std::iter::once(shell_word(&self.program))
            .chain(self.args.iter().map(|a| shell_word(&a.to_string_lossy())))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Runs the command to completion. Stdout is collected; stderr is
    /// collected and, with `stream_stderr`, also copied to this process's
    /// stderr line by line as it arrives (Nix's progress and build logs).
    /// A non-zero exit becomes [`NixError::CommandFailed`] carrying the whole
    /// stderr text.
    pub fn run(&self, stream_stderr: bool) -> Result<Output, NixError> {
        self.run_with(&mut |line: &[u8]| {
            if stream_stderr {
                let mut out = std::io::stderr().lock();
                // A closed terminal must not fail the build.
                let _ = out.write_all(line);
                let _ = out.flush();
            }
        })
    }

    /// [`NixCommand::run`], handing each line of stderr (with its newline)
    /// to `on_stderr_line` as it arrives: Nix's `--log-format
    /// internal-json` progress, read while the command runs.
    pub fn run_with(
        &self,
        on_stderr_line: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<Output, NixError> {
        let command_line = self.display();
        tracing::debug!(command = %command_line, "running");
        let mut child = Command::new(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    NixError::NixNotInstalled {
                        program: self.program.clone(),
                        source,
                    }
                } else {
                    NixError::Spawn {
                        command: command_line.clone(),
                        source,
                    }
                }
            })?;

        let spawn_err = |source| NixError::Spawn {
            command: command_line.clone(),
            source,
        };
        let mut stdout_pipe = child.stdout.take();
        let stderr_pipe = child.stderr.take();

        let (stdout, stderr) = std::thread::scope(|scope| {
            let stderr_reader = scope.spawn(move || -> std::io::Result<Vec<u8>> {
                let mut collected = Vec::new();
                let Some(pipe) = stderr_pipe else {
                    return Ok(collected);
                };
                let mut reader = BufReader::new(pipe);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    if reader.read_until(b'\n', &mut line)? == 0 {
                        break;
                    }
                    on_stderr_line(&line);
                    collected.extend_from_slice(&line);
                }
                Ok(collected)
            });
            let mut stdout = Vec::new();
            let stdout_result = match stdout_pipe.as_mut() {
                Some(pipe) => pipe.read_to_end(&mut stdout).map(|_| ()),
                None => Ok(()),
            };
            let stderr = match stderr_reader.join() {
                Ok(result) => result,
                Err(_) => Err(std::io::Error::other("stderr reader panicked")),
            };
            (stdout_result.map(|()| stdout), stderr)
        });
        let stdout = stdout.map_err(spawn_err)?;
        let stderr = stderr.map_err(spawn_err)?;
        let status = child.wait().map_err(spawn_err)?;

        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        let stderr = String::from_utf8_lossy(&stderr).into_owned();
        if !status.success() {
            tracing::debug!(command = %command_line, %status, "failed");
            return Err(NixError::CommandFailed {
                command: command_line,
                status: status.to_string(),
                code: status.code(),
                stderr: stderr.trim_end().to_owned(),
            });
        }
        Ok(Output { stdout, stderr })
    }
}

/// Quotes a word for display when it has characters a shell would mangle.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word.chars().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, '-' | '_' | '.' | '/' | ':' | '=' | '+' | ',' | '@' | '%')
        });
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_quoted_words() {
        let cmd = NixCommand::new("nix").args(EXPERIMENTAL).args([
            "build",
            "--option",
            "substituters",
            "",
            "/tmp/a b#x",
        ]);
        assert_eq!(
            cmd.display(),
            "nix --extra-experimental-features 'nix-command flakes' build --option substituters '' '/tmp/a b#x'"
        );
    }

    #[test]
    fn missing_program_is_nix_not_installed() {
        let err = NixCommand::new("kix-test-no-such-nix-program")
            .arg("--version")
            .run(false)
            .expect_err("the program does not exist");
        assert!(err.is_nix_missing(), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("kix-test-no-such-nix-program"), "{text}");
        assert!(text.contains("install Nix"), "{text}");
    }

    #[test]
    fn failure_carries_command_and_stderr() {
        let err = NixCommand::new("sh")
            .args(["-c", "echo first line >&2; echo second line >&2; exit 3"])
            .run(false)
            .expect_err("exit 3");
        match &err {
            NixError::CommandFailed {
                command, stderr, ..
            } => {
                assert!(command.starts_with("sh -c "), "{command}");
                assert_eq!(stderr, "first line\nsecond line");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("exit status: 3"), "{text}");
        assert!(text.contains("second line"), "{text}");
    }

    #[test]
    fn collects_stdout_and_stderr() {
        let out = NixCommand::new("sh")
            .args(["-c", "echo out; echo err >&2"])
            .run(false)
            .expect("sh runs");
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
    }
}
