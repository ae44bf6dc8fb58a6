//! The packages of a wave wait for health on shared watches: one watch of a
//! kind per namespace for the whole deploy, whatever the number of packages
//! (bench/flux-shape: a thousand one-Deployment packages had opened a
//! thousand watches, with their LISTs and relists, 3,908 LISTs in one
//! deploy).

mod common;

use common::*;
use kix_testkit::audit;

const PACKAGES: usize = 30;

#[tokio::test]
async fn a_wave_of_many_packages_waits_on_one_watch_per_kind_and_namespace() {
    let kit = Kit::new("wait-shared").await;
    let names: Vec<String> = (0..PACKAGES).map(|p| format!("app-{p:02}")).collect();
    let packages: Vec<Pkg> = names
        .iter()
        .map(|name| {
            Pkg::new(
                name,
                &[configmap(name, &[("k", "v")]), deployment(name, true)],
            )
        })
        .collect();
    let built = kit.build(&packages);

    let mark = audit::mark().expect("mark");
    let outcome = kit.deploy(&built).await;
    assert_eq!(outcome.phase, kix_api::Phase::Active);

    let requests = kit.requests(mark);
    let count = |verb: &str| {
        requests
            .iter()
            .filter(|r| {
                r.verb == verb
                    && r.resource == "deployments"
                    && r.namespace.as_deref() == Some(kit.ns())
                    && !r.is_next_page()
            })
            .count()
    };
    let (watches, lists) = (count("watch"), count("list"));
    // One watch (kube's watcher may restart it once); its first LIST, and
    // at most a few safety-net relists every 15 s while the wave waits.
    assert!(
        watches <= 2,
        "{PACKAGES} packages waited on {watches} watches of Deployments in {}",
        kit.ns()
    );
    assert!(
        lists <= 4,
        "{PACKAGES} packages listed Deployments in {} {lists} times",
        kit.ns()
    );
    kit.cleanup().await;
}
