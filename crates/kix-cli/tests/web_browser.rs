//! The web view in a real browser: Debian's headless Chromium (installed by
//! checks/setup), driven over the DevTools protocol (chromiumoxide). The
//! cluster list shows the phases the records hold, and a deploy changes it
//! live, through server-sent events, without a reload.

mod cli_support;
mod web_support;

use std::time::{Duration, Instant};

use chromiumoxide::{Browser, BrowserConfig, Page};
use cli_support::{Kix, configmap};
use futures::StreamExt;
use web_support::Ui;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Headless Chromium with a profile of its own and no background
/// networking (this machine's network is closed).
async fn browser(profile: &std::path::Path) -> (Browser, tokio::task::JoinHandle<()>) {
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: run checks/setup (it installs Debian's chromium)"
    );
    let config = BrowserConfig::builder()
        .chrome_executable(CHROMIUM)
        .no_sandbox()
        .user_data_dir(profile)
        .args([
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .build()
        .expect("a browser configuration");
    let (browser, mut handler) = Browser::launch(config).await.expect("Chromium starts");
    let events = tokio::spawn(async move { while handler.next().await.is_some() {} });
    (browser, events)
}

/// `expression` evaluated in `page`, as a string ("" for null).
async fn text(page: &Page, expression: &str) -> String {
    let value: serde_json::Value = page
        .evaluate(format!("String(({expression}) ?? '')"))
        .await
        .expect("evaluating in the page")
        .into_value()
        .expect("a value");
    value.as_str().unwrap_or_default().to_string()
}

/// Polls `expression` until it is `want`; how long that took.
async fn until(page: &Page, expression: &str, want: &str, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let got = text(page, expression).await;
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{expression} is {got:?}, not {want:?}, after {within:?}; the page: {}",
            text(page, "document.getElementById('main').innerText").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_list_shows_phases_and_updates_live_on_a_deploy() {
    let kix = Kix::new("web-live").await;
    let v1 = kix.tree("v1", &configmap("a", "1"), serde_json::json!({}));
    let v2 = kix.tree("v2", &configmap("a", "2"), serde_json::json!({}));
    kix.deploy(&v1, &[]).ok();
    let ui = Ui::start(&kix_testkit::kubeconfig_path(), &[]);
    let profile = tempfile::tempdir().expect("profile dir");
    let (mut browser, events) = browser(profile.path()).await;
    let page = browser
        .new_page(ui.url("/clusters"))
        .await
        .expect("the page loads");

    let row = format!(
        "document.querySelector('tr[data-cluster=\"{}\"]')",
        kix.cluster()
    );
    let phase = format!("{row}?.querySelector('[data-phase]')?.dataset.phase");
    let record = format!("{row}?.children[2]?.innerText");
    until(&page, &phase, "Active", Duration::from_secs(10)).await;
    assert_eq!(text(&page, &record).await, kix.name(1));
    until(
        &page,
        "document.body.dataset.live",
        "open",
        Duration::from_secs(10),
    )
    .await;
    // A reload would forget it.
    text(&page, "window.kixMarker = 'kept'").await;

    kix.deploy(&v2, &[]).ok();
    let records = kix.records().await;
    assert_eq!(records.len(), 2);
    let took = until(&page, &record, &kix.name(2), Duration::from_secs(10)).await;
    assert!(
        took < Duration::from_secs(2),
        "the page showed {} {took:?} after the deploy ended (bound: 2 s)",
        kix.name(2)
    );
    // The new record may first show as Applying: its Active comes live too.
    until(&page, &phase, "Active", Duration::from_secs(10)).await;
    assert_eq!(text(&page, "window.kixMarker").await, "kept", "no reload");

    // The history page of the cluster, loaded now, shows both.
    let history = browser
        .new_page(ui.url(&format!("/clusters/{}", kix.cluster())))
        .await
        .expect("the history page loads");
    let phase_of = |name: String| {
        format!("document.querySelector('tr[data-record=\"{name}\"] [data-phase]')?.dataset.phase")
    };
    until(
        &history,
        &phase_of(kix.name(2)),
        "Active",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(text(&history, &phase_of(kix.name(1))).await, "Superseded");

    browser.close().await.expect("closing Chromium");
    let _ = browser.wait().await;
    events.abort();
}
