# kix.lib.helm: Helm charts as package fragments of mkCluster.
#
#   kix.lib.helm.fetch { pkgs, repo, chart, version, hash, helm ? pkgs.kubernetes-helm, cacert ? pkgs.cacert }
#   kix.lib.helm.render { pkgs, chart, releaseName, namespace, values ? {}, valuesFiles ? [],
#                         kubeVersion ? null, apiVersions ? [], includeCRDs ? true,
#                         helm ? pkgs.kubernetes-helm }
#
# `fetch` is a fixed-output derivation: the chart archive (.tgz) exactly as
# the repository serves it, fetched by `helm pull` (an HTTP(S) repository's
# index.yaml names the archive; `repo = "oci://registry/path"` pulls
# `oci://registry/path/<chart>`), checked against `hash` (an SRI hash,
# "sha256-..." of the .tgz). The result carries `chart` and `version`.
#
# `render` runs the real `helm template` in a build and returns a package
# fragment for `packages.<p>`:
#
#   { manifests = [ <rendered> ]; namespace = <namespace>; version = <chart version, when fetched>;
#     source = { helm = { chart; version; repo?; }; }; }
#
# so `packages.web = kix.lib.helm.render { ... } // { version = "1.2.0"; };`
# completes it (`dependsOn`, `health`, ... may be added the same way).
# `source` names the chart and its version (and the repository, when it
# came from `fetch`) for `kix build` and `kix validate` to show: taken from
# `fetch`'s result, from a chart directory's Chart.yaml (its top-level
# `name:` and `version:` lines), or from a `<chart>-<version>.tgz` file
# name; left out when `chart` is some other derivation (reading it would
# need a build during evaluation).
# The rendered directory is helm's own `--output-dir` layout,
# `<chart>/templates/...`, `<chart>/crds/...` (with `includeCRDs`) and
# `<chart>/charts/<subchart>/...`; every hook is there with its
# annotations (`helm.sh/hook`, `-weight`, `-delete-policy`), `test` hooks
# included, and kix gives them their meaning (docs/concepts.md, "Helm's
# annotations"). CustomResourceDefinitions go to kix's CRD phase whatever
# their file. Objects without a namespace take the package's, the release
# namespace, as `helm install` would put them there.
#
# `values` is a Nix attrset written as JSON (helm reads it as YAML) and
# given after `valuesFiles`, so it wins over them. `chart` is a chart
# directory, a .tgz, or the result of `fetch`. `helm` is a package with
# bin/helm, or the helm executable itself (a path, or an absolute path
# string). `kubeVersion` ("1.36.3") and `apiVersions` set what the chart
# sees as `.Capabilities`; without `kubeVersion` helm uses its own default
# (the Kubernetes release it was built against), so set it to the cluster's.
#
# Only `pkgs.runCommand` is used to render (and `pkgs.cacert`, unless
# `cacert` is given, to fetch over HTTPS), so the offline tests run with the
# host-tools builder of nix/tests.
{
  describeValue,
  quote,
  shellQuote,
  isDnsLabel,
  checkAll,
  tool,
}:
let
  inherit (builtins)
    all
    concatMap
    concatStringsSep
    filter
    head
    isAttrs
    isBool
    isList
    isString
    match
    pathExists
    readFile
    split
    toJSON
    ;

  isHash = h: isString h && match "sha256-[A-Za-z0-9+/]{43}=" h != null;

  # A file or directory given to a build: a path, an absolute path string
  # (imported into the store like a path) or a derivation.
  fileSource =
    fail: what: f:
    if builtins.isPath f || isAttrs f && f ? outPath then
      f
    else if isString f && builtins.substring 0 1 f == "/" then
      (if builtins.hasContext f then f else /. + f)
    else
      fail "${what}, got ${describeValue f}";

  # helm needs somewhere to write its caches and config; none is kept.
  helmHome = ''
    export HOME="$TMPDIR/home"
    export HELM_CACHE_HOME="$HOME/cache" HELM_CONFIG_HOME="$HOME/config" HELM_DATA_HOME="$HOME/data"
    mkdir -p "$HOME"
  '';

  # The first top-level `field: value` line of a Chart.yaml (quotes and a
  # trailing comment dropped); null when there is none.
  chartYamlField =
    text: field:
    let
      lines = filter isString (split "\n" text);
      valueOf = line: match "${field}:[[:space:]]*[\"']?([^\"'#[:space:]]+)[\"']?[[:space:]]*(#.*)?\r?" line;
      values = concatMap (line: let m = valueOf line; in if m == null then [ ] else [ (head m) ]) lines;
    in
    if values == [ ] then null else head values;

  # What `source.helm` says of a chart: from fetch's result, a chart
  # directory's Chart.yaml or a `<chart>-<version>.tgz` name; null when
  # none of them tells.
  chartSource =
    chart:
    let
      local =
        if builtins.isPath chart then
          chart
        else if isString chart && !(builtins.hasContext chart) && builtins.substring 0 1 chart == "/" then
          /. + chart
        else
          null;
      chartYaml = if local == null then null else local + "/Chart.yaml";
      fromYaml =
        let
          text = readFile chartYaml;
          name = chartYamlField text "name";
          version = chartYamlField text "version";
        in
        if name == null || version == null then null else { chart = name; inherit version; };
      fromArchive =
        let
          m = match "(.+)-(v?[0-9]+\\.[0-9]+\\.[0-9]+[^/]*)\\.tgz" (baseNameOf (toString local));
        in
        if m == null then
          null
        else
          {
            chart = head m;
            version = builtins.elemAt m 1;
          };
    in
    if isAttrs chart && chart ? chart && chart ? version then
      { inherit (chart) chart version; } // (if chart ? repo then { inherit (chart) repo; } else { })
    else if local == null then
      null
    else if pathExists chartYaml then
      fromYaml
    else
      fromArchive;

  fetch =
    {
      pkgs,
      repo,
      chart,
      version,
      hash,
      helm ? pkgs.kubernetes-helm,
      cacert ? pkgs.cacert or null,
    }:
    let
      fail = msg: throw "kix.lib.helm.fetch: chart ${quote chart}: ${msg}";
      isOci = isString repo && match "oci://.+" repo != null;
      # An OCI registry names the chart in the reference; an HTTP
      # repository's index.yaml names its archive.
      source =
        if isOci then
          shellQuote "${repo}/${chart}"
        else
          "--repo ${shellQuote repo} ${shellQuote chart}";
      certs =
        if cacert == null then
          ""
        else
          "export SSL_CERT_FILE=${shellQuote "${cacert}/etc/ssl/certs/ca-bundle.crt"}\n";
      archive = pkgs.runCommand "helm-chart-${chart}-${version}.tgz" {
        outputHashMode = "flat";
        outputHashAlgo = "sha256";
        outputHash = hash;
        preferLocalBuild = true;
      } ''
        set -e
        ${helmHome}${certs}mkdir "$TMPDIR/pulled"
        ${tool "helm" helm} pull ${source} --version ${shellQuote version} --destination "$TMPDIR/pulled"
        for f in "$TMPDIR"/pulled/*.tgz; do cp "$f" "$out"; done
      '';
    in
    checkAll [
      (isDnsLabel chart || fail "`chart` must be the chart's name (a DNS label), got ${describeValue chart}")
      (isString repo && match "(https?|oci)://[^[:space:]]+" repo != null || fail "`repo` must be an http(s):// chart repository or an oci:// registry path, got ${describeValue repo}")
      (isString version && version != "" || fail "`version` must be the chart version (a non-empty string), got ${describeValue version}")
      (isHash hash || fail "`hash` must be the SRI sha256 of the chart archive (\"sha256-...=\"), got ${describeValue hash}")
    ] (archive // { inherit chart version repo; });

  render =
    {
      pkgs,
      chart,
      releaseName,
      namespace,
      values ? { },
      valuesFiles ? [ ],
      kubeVersion ? null,
      apiVersions ? [ ],
      includeCRDs ? true,
      helm ? pkgs.kubernetes-helm,
    }:
    let
      fail = msg: throw "kix.lib.helm.render: release ${quote releaseName}: ${msg}";
      source = fileSource fail "`chart` must be a chart directory, a .tgz or the result of kix.lib.helm.fetch" chart;
      flag = f: v: " ${f} ${shellQuote v}";
      valuesFileArgs = concatStringsSep "" (
        map (
          f:
          flag "--values" "${fileSource fail "`valuesFiles` entries must be files (paths)" f}"
        ) valuesFiles
      );
      args =
        flag "--namespace" namespace
        + valuesFileArgs
        + " --values \"$kixValuesPath\""
        + (if kubeVersion == null then "" else flag "--kube-version" kubeVersion)
        + concatStringsSep "" (map (flag "--api-versions") apiVersions)
        + (if includeCRDs then " --include-crds" else "");
      checks = [
        (isString releaseName && match "[a-z0-9]([-a-z0-9]*[a-z0-9])?" releaseName != null || fail "`releaseName` must be a lowercase DNS name (Helm's rule), got ${describeValue releaseName}")
        (isDnsLabel namespace || fail "`namespace` must be a DNS label, got ${describeValue namespace}")
        (isAttrs values && !(values ? outPath) || fail "`values` must be an attrset (written as JSON), got ${describeValue values}")
        (isList valuesFiles || fail "`valuesFiles` must be a list of files, got ${describeValue valuesFiles}")
        (kubeVersion == null || isString kubeVersion && match "v?[0-9]+\\.[0-9]+(\\.[0-9]+)?" kubeVersion != null || fail "`kubeVersion` must be a Kubernetes version such as \"1.36.3\", got ${describeValue kubeVersion}")
        (isList apiVersions && all isString apiVersions || fail "`apiVersions` must be a list of strings such as \"monitoring.coreos.com/v1\", got ${describeValue apiVersions}")
        (isBool includeCRDs || fail "`includeCRDs` must be a boolean, got ${describeValue includeCRDs}")
      ];
      rendered = pkgs.runCommand "helm-${releaseName}" {
        kixValues = toJSON values;
        passAsFile = [ "kixValues" ];
        preferLocalBuild = true;
        allowSubstitutes = false;
      } ''
        set -e
        ${helmHome}mkdir -p "$out"
        ${tool "helm" helm} template ${shellQuote releaseName} ${shellQuote "${source}"}${args} --output-dir "$out" >/dev/null
      '';
    in
    checkAll checks (
      {
        manifests = [ rendered ];
        inherit namespace;
      }
      // (if isAttrs chart && chart ? version then { inherit (chart) version; } else { })
      // (
        let
          known = chartSource chart;
        in
        if known == null then { } else { source.helm = known; }
      )
    );
in
{
  inherit fetch render;
}
