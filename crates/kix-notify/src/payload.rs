//! What each target is sent for a notice.

use serde_json::{Value, json};

use crate::{Event, Notice, Secret, Target};

/// One HTTP POST: where, with which headers, what JSON. URL and header
/// values are [`Secret`]s: a webhook's URL and a token are credentials.
#[derive(Clone, Debug)]
pub struct Request {
    pub url: Secret,
    pub headers: Vec<(String, Secret)>,
    pub body: Value,
}

/// GitHub shows this much of a status's description.
const GITHUB_DESCRIPTION: usize = 140;

/// The request that tells `target` of `notice`; None when the target takes
/// no such notice (a commit status for a build without a source revision,
/// or for an event that is not about the commit's deploy).
pub fn request(target: &Target, notice: &Notice) -> Option<Request> {
    match target {
        Target::Webhook { url } => Some(Request {
            url: url.clone(),
            headers: vec![],
            body: json!(notice),
        }),
        Target::Slack { url } => Some(Request {
            url: url.clone(),
            headers: vec![],
            body: json!({"text": slack_text(notice)}),
        }),
        Target::GitHub {
            api,
            repository,
            token,
        } => {
            let sha = revision(notice)?;
            let state = github_state(notice.event)?;
            let mut body = json!({
                "state": state,
                "context": context(notice),
                "description": cut(&description(notice), GITHUB_DESCRIPTION),
            });
            if let Some(link) = &notice.link {
                body["target_url"] = json!(link);
            }
            Some(Request {
                url: Secret::new(format!(
                    "{}/repos/{repository}/statuses/{sha}",
                    api.trim_end_matches('/')
                )),
                headers: vec![
                    (
                        "Authorization".into(),
                        Secret::new(format!("Bearer {}", token.expose())),
                    ),
                    ("Accept".into(), Secret::new("application/vnd.github+json")),
                    ("X-GitHub-Api-Version".into(), Secret::new("2022-11-28")),
                ],
                body,
            })
        }
        Target::GitLab {
            api,
            project,
            token,
        } => {
            let sha = revision(notice)?;
            let state = gitlab_state(notice.event)?;
            let mut body = json!({
                "state": state,
                "name": context(notice),
                "description": cut(&description(notice), GITHUB_DESCRIPTION),
            });
            if let Some(link) = &notice.link {
                body["target_url"] = json!(link);
            }
            Some(Request {
                url: Secret::new(format!(
                    "{}/projects/{}/statuses/{sha}",
                    api.trim_end_matches('/'),
                    project.replace('/', "%2F")
                )),
                headers: vec![("PRIVATE-TOKEN".into(), token.clone())],
                body,
            })
        }
    }
}

/// Why `body` is not a request body GitHub's REST reference documents for
/// "Create a commit status": `state` required, one of error, failure,
/// pending, success; `target_url` and `description` strings or null and
/// `context` a string, optional; no other field. None: it is one.
pub fn github_status_problem(body: &Value) -> Option<String> {
    let Some(object) = body.as_object() else {
        return Some("not a JSON object".into());
    };
    match object.get("state").and_then(Value::as_str) {
        Some("error" | "failure" | "pending" | "success") => {}
        Some(other) => return Some(format!("state {other:?} is not a GitHub status state")),
        None => return Some("state is required".into()),
    }
    object
        .iter()
        .find_map(|(field, value)| match field.as_str() {
            "state" => None,
            "target_url" | "description" => (!(value.is_string() || value.is_null()))
                .then(|| format!("{field} is not a string")),
            "context" => (!value.is_string()).then(|| "context is not a string".to_string()),
            other => Some(format!("GitHub documents no field {other:?}")),
        })
}

/// A commit SHA (hex, 7 to 64 characters), or none.
fn revision(notice: &Notice) -> Option<&str> {
    notice
        .revision
        .as_deref()
        .filter(|r| (7..=64).contains(&r.len()) && r.chars().all(|c| c.is_ascii_hexdigit()))
}

/// One status per Kix cluster on a commit.
fn context(notice: &Notice) -> String {
    format!("kix/{}", notice.cluster)
}

fn description(notice: &Notice) -> String {
    format!("{} {}: {}", notice.record, notice.event, notice.message)
}

/// Only the events about the deploy of the commit's build.
fn github_state(event: Event) -> Option<&'static str> {
    match event {
        Event::Applying | Event::DeletionsHeld => Some("pending"),
        Event::Active => Some("success"),
        Event::Degraded | Event::Failed => Some("failure"),
        Event::DriftFight | Event::StuckDeletion => None,
    }
}

fn gitlab_state(event: Event) -> Option<&'static str> {
    match event {
        Event::Applying => Some("running"),
        Event::DeletionsHeld => Some("pending"),
        Event::Active => Some("success"),
        Event::Degraded | Event::Failed => Some("failed"),
        Event::DriftFight | Event::StuckDeletion => None,
    }
}

/// Slack's mrkdwn: `&`, `<` and `>` escaped, a link in `<url|text>`.
fn slack_text(notice: &Notice) -> String {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut text = format!(
        "*{}* {} `{}`: {}",
        escape(&notice.cluster),
        notice.event,
        escape(&notice.record),
        escape(&notice.message)
    );
    if let Some(version) = &notice.version {
        text.push_str(&format!(" (version {})", escape(version)));
    }
    if let Some(link) = &notice.link {
        text.push_str(&format!(" <{}|view>", escape(link)));
    }
    text
}

/// At most `limit` characters, `…` marking a cut.
fn cut(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(limit - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(event: Event, revision: Option<&str>) -> Notice {
        Notice {
            event,
            cluster: "web".into(),
            record: "web-7".into(),
            message: "3 objects applied".into(),
            store_path: "/nix/store/00000000000000000000000000000000-kix-web".into(),
            version: Some("1.2.0".into()),
            revision: revision.map(str::to_string),
            plan_digest: "sha256:abc".into(),
            link: Some("https://kix.example/clusters/web/activations/web-7".into()),
        }
    }

    const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn a_commit_status_needs_a_revision_and_an_event_about_the_deploy() {
        let github = Target::GitHub {
            api: "https://api.github.com".into(),
            repository: "acme/infra".into(),
            token: Secret::new("t"),
        };
        assert!(request(&github, &notice(Event::Active, None)).is_none());
        assert!(request(&github, &notice(Event::Active, Some("main"))).is_none());
        assert!(request(&github, &notice(Event::DriftFight, Some(SHA))).is_none());
        let sent = request(&github, &notice(Event::Active, Some(SHA))).expect("a status");
        assert_eq!(
            sent.url.expose(),
            format!("https://api.github.com/repos/acme/infra/statuses/{SHA}")
        );
        assert_eq!(sent.body["state"], "success");
        assert_eq!(sent.body["context"], "kix/web");
    }

    #[test]
    fn descriptions_are_cut_to_what_github_shows() {
        let mut long = notice(Event::Failed, Some(SHA));
        long.message = "é".repeat(500);
        let github = Target::GitHub {
            api: "https://api.github.com/".into(),
            repository: "acme/infra".into(),
            token: Secret::new("t"),
        };
        let sent = request(&github, &long).expect("a status");
        let description = sent.body["description"].as_str().expect("text");
        assert_eq!(description.chars().count(), GITHUB_DESCRIPTION);
        assert!(description.ends_with('…'));
        assert_eq!(sent.body["state"], "failure");
    }

    #[test]
    fn slack_text_is_escaped() {
        let mut n = notice(Event::Degraded, None);
        n.message = "<!channel> & <b>".into();
        let sent = request(
            &Target::Slack {
                url: Secret::new("https://hooks.example/x"),
            },
            &n,
        )
        .expect("a message");
        let text = sent.body["text"].as_str().expect("text");
        assert!(text.contains("&lt;!channel&gt; &amp; &lt;b&gt;"), "{text}");
        assert!(!text.contains("<!channel>"), "{text}");
    }

    #[test]
    fn secrets_do_not_print() {
        let target = Target::GitLab {
            api: "https://gitlab.example/api/v4".into(),
            project: "acme/infra".into(),
            token: Secret::new("glpat-SECRET"),
        };
        let sent = request(&target, &notice(Event::Applying, Some(SHA))).expect("a status");
        assert!(!format!("{target:?} {sent:?}").contains("SECRET"));
        assert!(
            sent.url
                .expose()
                .contains("/projects/acme%2Finfra/statuses/")
        );
        assert_eq!(sent.body["state"], "running");
    }
}
