# Calls of kix.lib.helm and kix.lib.kustomize (and a package `source`, which
# they set) that must fail evaluation, each
# with the substrings its error message must contain. eval.nix checks that
# each one throws; crates/kix-cli/tests/charts.rs checks the messages.
{
  system ? builtins.currentSystem,
}:
let
  kix = import ../default.nix { };
  pkgs = import ./host-tools.nix { inherit system; };
  case = expect: value: { inherit expect value; };
in
{
  # Values are Nix attrsets, never YAML strings.
  helmValuesAsString =
    case
      [
        "kix.lib.helm.render: release \"web\""
        "`values` must be an attrset"
        "got the string \"replicas: 3\""
      ]
      (
        kix.mkCluster {
          inherit pkgs;
          name = "prod";
          packages.web =
            kix.helm.render {
              inherit pkgs;
              chart = ./fixtures;
              releaseName = "web";
              namespace = "web";
              values = "replicas: 3";
              helm = "/bin/true";
            }
            // {
              version = "1";
            };
        }
      );

  helmFetchWithoutHash =
    case
      [
        "kix.lib.helm.fetch: chart \"web\""
        "`hash` must be the SRI sha256 of the chart archive"
      ]
      (kix.helm.fetch {
        inherit pkgs;
        repo = "https://charts.example.com";
        chart = "web";
        version = "1.0.0";
        hash = "";
        helm = "/bin/true";
      });

  kustomizeRelativePath =
    case
      [
        "kix.lib.kustomize.build"
        "`path` must be a directory"
        "got the string \"overlays/prod\""
      ]
      (kix.kustomize.build {
        inherit pkgs;
        path = "overlays/prod";
        kustomize = "/bin/true";
      });

  # `source` (which render and build set) is checked like any attribute.
  packageSourceWithoutVersion =
    case
      [
        "package \"web\""
        "`source`: `helm.version` is missing"
      ]
      (kix.mkCluster {
        inherit pkgs;
        name = "prod";
        packages.web = {
          version = "1";
          source.helm.chart = "web";
        };
      });
}
