//! The embedded schema files are what their names say.

use kix_validate::{Catalogue, DEFAULT_KUBERNETES_VERSION, supported_versions};

#[test]
fn each_schema_file_holds_the_version_in_its_name() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("schemas dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let expected: Vec<String> = supported_versions()
        .iter()
        .map(|v| format!("k8s-{v}.json"))
        .collect();
    assert_eq!(
        files, expected,
        "every file is embedded, every embedded file exists"
    );
    for version in supported_versions() {
        let catalogue = Catalogue::get(version).expect("embedded schemas parse");
        assert_eq!(catalogue.version(), version);
    }
}

#[test]
fn the_default_version_is_the_pinned_control_plane_release() {
    let versions = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../checks/versions.env"),
    )
    .expect("checks/versions.env");
    let pinned = versions
        .lines()
        .find_map(|l| l.strip_prefix("K8S_VERSION="))
        .expect("K8S_VERSION");
    assert_eq!(DEFAULT_KUBERNETES_VERSION, pinned);
    assert!(supported_versions().contains(&pinned));
}
