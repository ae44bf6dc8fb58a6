# kix.lib.kustomize.build { pkgs, path, kustomize ? pkgs.kustomize }
#
# Runs the real `kustomize build` of an overlay (a directory with a
# kustomization.yaml: a path, an absolute path string or a derivation) in a
# build and returns a package fragment for `packages.<p>`:
#
#   { manifests = [ <built> ]; source = { kustomize = { path = <overlay>; }; }; }
#
# where <built> is a directory holding `kustomize build`'s output as one
# multi-document YAML file, `kustomize-build.yaml`, and <overlay> names the
# overlay as it lies in the store, for `kix build` and `kix validate` to
# show: the copied directory's name and the path under it
# (`"${./k8s}/overlays/prod"` is `k8s/overlays/prod`; `./overlays/prod` is
# `prod`), so the build does not depend on where the checkout is. Complete
# it with the package's own attributes:
#
#   packages.web = kix.lib.kustomize.build { inherit pkgs; path = ./overlays/prod; } // { version = "1.2.0"; };
#
# `kustomize` is a package with bin/kustomize, or the kustomize executable
# itself (a path, or an absolute path string). The overlay is copied into
# the store, so it may refer only to files under the directory given: an
# overlay with `resources: [ ../../base ]` is given as a directory inside the
# copied tree, `path = "${./k8s}/overlays/prod";` (the whole ./k8s is
# copied; `./k8s/overlays/prod` alone would leave its base behind). Remote
# bases cannot be fetched in a build. Only `pkgs.runCommand` is used.
{
  describeValue,
  shellQuote,
  tool,
}:
let
  inherit (builtins) isAttrs isString match substring;

  build =
    {
      pkgs,
      path,
      kustomize ? pkgs.kustomize,
    }:
    let
      fail = msg: throw "kix.lib.kustomize.build: ${msg}";
      source =
        if builtins.isPath path || isAttrs path && path ? outPath then
          path
        else if isString path && substring 0 1 path == "/" then
          (if builtins.hasContext path then path else /. + path)
        else
          fail "`path` must be a directory (a path, an absolute path string or a derivation), got ${describeValue path}";
      # The overlay's directory name, without the store path it may be in.
      name = builtins.unsafeDiscardStringContext (builtins.baseNameOf (toString path));
      # In the store: `<name>/<path under it>`; else the directory's name,
      # which is what it is copied as.
      inStore = match "${builtins.storeDir}/[0-9a-df-np-sv-z]{32}-(.+)" (
        builtins.unsafeDiscardStringContext (toString path)
      );
      shownPath = if inStore == null then name else builtins.head inStore;
      built = pkgs.runCommand "kustomize-${if match "[A-Za-z0-9._+-]+" name != null then name else "overlay"}" {
        preferLocalBuild = true;
        allowSubstitutes = false;
      } ''
        set -e
        export HOME="$TMPDIR/home"
        mkdir -p "$out"
        ${tool "kustomize" kustomize} build ${shellQuote "${source}"} > "$out/kustomize-build.yaml"
      '';
    in
    # The path is checked as soon as the fragment is looked at.
    builtins.seq source {
      manifests = [ built ];
      source.kustomize.path = shownPath;
    };
in
{
  inherit build;
}
