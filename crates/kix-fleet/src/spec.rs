//! The fleet file `kix.lib.mkFleet` builds (pure: no I/O but reading it).
//!
//! ```json
//! {"format":1,"fleet":"prod","maxParallel":4,"pause":"5m","waves":[["staging"],["eu-1","eu-2"]],
//!  "members":{"staging":{"build":"/nix/store/…-kix-web","cluster":"web","context":"staging",
//!             "kubeconfig":null,"operator":false,"wave":0}}}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::SpecError;

/// The only fleet file format this kix reads.
pub const FORMAT: u32 = 1;

/// A member's name (an attribute of `members`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MemberName(pub String);

impl std::fmt::Display for MemberName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One member: a Kix cluster build and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemberSpec {
    /// The build's store path (a format-1 manifest tree).
    pub build: String,
    /// The Kix cluster of the build, when Nix knew it (mkCluster's).
    #[serde(default)]
    pub cluster: Option<String>,
    /// The kubeconfig context; none: the build's `settings.context`, else
    /// the kubeconfig's current context.
    #[serde(default)]
    pub context: Option<String>,
    /// The kubeconfig file; none: the one `kix` was given (`--kubeconfig`,
    /// `$KUBECONFIG`, `~/.kube/config`).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The in-cluster operator applies it (`kix deploy --operator`).
    #[serde(default)]
    pub operator: bool,
    /// Its wave (0 first).
    pub wave: usize,
}

/// A fleet file, checked: every member in exactly one wave, waves naming
/// only members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetSpec {
    pub format: u32,
    pub fleet: String,
    pub max_parallel: usize,
    /// How long a wave stays Active and healthy before the next starts.
    pub pause: String,
    pub waves: Vec<Vec<MemberName>>,
    pub members: BTreeMap<MemberName, MemberSpec>,
}

/// A fleet file read from a store path (or a directory holding
/// `fleet.json`), with the identity of its content.
#[derive(Debug, Clone)]
pub struct FleetFile {
    /// What was read (the store path of the fleet build).
    pub path: PathBuf,
    pub spec: FleetSpec,
    /// The rollout id: the first 20 hex digits of the file's SHA-256. The
    /// same fleet build is the same rollout; it names the rollout on each
    /// member's Activation (`kix.run/fleet-rollout`).
    pub rollout: RolloutId,
}

/// Names one rollout of one fleet build: a Kubernetes label value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RolloutId(pub String);

impl std::fmt::Display for RolloutId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl FleetFile {
    /// Reads `path`: the fleet file itself, or a directory with `fleet.json`.
    pub fn read(path: &Path) -> Result<FleetFile, SpecError> {
        let file = if path.is_dir() {
            path.join("fleet.json")
        } else {
            path.to_path_buf()
        };
        let text = std::fs::read(&file).map_err(|source| SpecError::Read {
            path: file.clone(),
            source,
        })?;
        let spec = FleetSpec::parse(&text).map_err(|reason| SpecError::Invalid {
            path: file.clone(),
            reason,
        })?;
        Ok(FleetFile {
            path: path.to_path_buf(),
            spec,
            rollout: rollout_id(&text),
        })
    }
}

fn rollout_id(text: &[u8]) -> RolloutId {
    let digest = hex::encode(Sha256::digest(text));
    RolloutId(digest[..20].to_string())
}

impl FleetSpec {
    /// Parses and checks a fleet file's text; the error says what is wrong,
    /// naming the member.
    pub fn parse(text: &[u8]) -> Result<FleetSpec, String> {
        let spec: FleetSpec = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        spec.check()?;
        Ok(spec)
    }

    /// The checks mkFleet makes, again: a fleet file may be written by hand.
    fn check(&self) -> Result<(), String> {
        if self.format != FORMAT {
            return Err(format!(
                "format {} is not supported (this kix reads format {FORMAT})",
                self.format
            ));
        }
        if self.max_parallel == 0 {
            return Err("maxParallel must be at least 1".into());
        }
        parse_pause(&self.pause)?;
        let mut placed: BTreeMap<&MemberName, usize> = BTreeMap::new();
        for (i, wave) in self.waves.iter().enumerate() {
            if wave.is_empty() {
                return Err(format!("wave {i} is empty"));
            }
            for member in wave {
                if !self.members.contains_key(member) {
                    return Err(format!(
                        "wave {i} names member {:?}, which is not a member",
                        member.0
                    ));
                }
                if let Some(first) = placed.insert(member, i) {
                    return Err(format!(
                        "member {:?} is in two waves ({first} and {i})",
                        member.0
                    ));
                }
            }
        }
        for (name, member) in &self.members {
            match placed.get(name) {
                None => return Err(format!("member {:?} is in no wave", name.0)),
                Some(&wave) if wave != member.wave => {
                    return Err(format!(
                        "member {:?} says wave {} but is in wave {wave}",
                        name.0, member.wave
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// `pause` as a duration.
    pub fn pause(&self) -> Duration {
        parse_pause(&self.pause).unwrap_or_default()
    }

    /// Where a member runs: its wave and its place in the wave (a wave's
    /// members start in the order the wave lists them).
    pub fn position(&self, member: &MemberName) -> (usize, usize) {
        self.waves
            .iter()
            .enumerate()
            .find_map(|(w, wave)| wave.iter().position(|m| m == member).map(|i| (w, i)))
            .unwrap_or((usize::MAX, usize::MAX))
    }

    /// The members of wave `i`, in the wave's order.
    pub fn wave(&self, i: usize) -> impl Iterator<Item = (&MemberName, &MemberSpec)> {
        self.waves
            .get(i)
            .into_iter()
            .flatten()
            .filter_map(|name| self.members.get_key_value(name))
    }
}

/// `5m`, `90s`, `1h30m` (units s m h d w), as mkFleet accepts.
pub fn parse_pause(text: &str) -> Result<Duration, String> {
    let bad = || format!("pause {text:?} is not a duration such as 0s, 90s, 5m, 1h30m");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        let n: u64 = number.parse().map_err(|_| bad())?;
        total = total.saturating_add(n.saturating_mul(unit));
        number.clear();
    }
    if !number.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fleet(members: serde_json::Value, waves: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "format": 1, "fleet": "prod", "maxParallel": 2, "pause": "1m30s",
            "waves": waves, "members": members,
        }))
        .expect("test value")
    }

    fn member(wave: usize) -> serde_json::Value {
        json!({"build": "/nix/store/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-kix-web", "cluster": "web",
               "context": null, "kubeconfig": null, "operator": false, "wave": wave})
    }

    #[test]
    fn a_good_fleet_reads_with_its_waves_and_pause() {
        let spec = FleetSpec::parse(&fleet(
            json!({"a": member(0), "b": member(1), "c": member(1)}),
            json!([["a"], ["c", "b"]]),
        ))
        .expect("test value");
        assert_eq!(spec.pause(), Duration::from_secs(90));
        let second: Vec<&str> = spec.wave(1).map(|(n, _)| n.0.as_str()).collect();
        assert_eq!(second, ["c", "b"]);
        assert_eq!(spec.wave(2).count(), 0);
        let b = MemberName("b".into());
        assert_eq!(spec.position(&b), (1, 1), "b is second in wave 1");
    }

    #[test]
    fn a_hand_written_fleet_is_checked_as_mk_fleet_checks_it() {
        let cases = [
            (
                json!({"a": member(0)}),
                json!([["a", "x"]]),
                "wave 0 names member \"x\", which is not a member",
            ),
            (
                json!({"a": member(0)}),
                json!([["a"], ["a"]]),
                "member \"a\" is in two waves (0 and 1)",
            ),
            (
                json!({"a": member(0), "b": member(0)}),
                json!([["a"]]),
                "member \"b\" is in no wave",
            ),
            (
                json!({"a": member(0)}),
                json!([["a"], []]),
                "wave 1 is empty",
            ),
            (
                json!({"a": member(1)}),
                json!([["a"]]),
                "member \"a\" says wave 1 but is in wave 0",
            ),
        ];
        for (members, waves, expected) in cases {
            assert_eq!(
                FleetSpec::parse(&fleet(members, waves)),
                Err(expected.to_string())
            );
        }
        let mut other = serde_json::from_slice::<serde_json::Value>(&fleet(
            json!({"a": member(0)}),
            json!([["a"]]),
        ))
        .expect("test value");
        other["format"] = json!(2);
        assert_eq!(
            FleetSpec::parse(&serde_json::to_vec(&other).expect("test value")),
            Err("format 2 is not supported (this kix reads format 1)".to_string())
        );
    }

    #[test]
    fn pauses_read_like_mk_fleet_durations() {
        assert_eq!(parse_pause("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_pause("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_pause("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_pause("5").is_err());
        assert!(parse_pause("").is_err());
        assert!(parse_pause("5x").is_err());
    }

    #[test]
    fn the_rollout_id_is_the_content_of_the_fleet_file() {
        let a = rollout_id(b"one");
        assert_eq!(a, rollout_id(b"one"));
        assert_ne!(a, rollout_id(b"two"));
        assert_eq!(a.0.len(), 20);
    }
}
