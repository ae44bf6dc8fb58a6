# A runCommand-style builder made of the host's own tools (/bin/sh and
# coreutils under /usr/bin), standing in for nixpkgs in the offline tests
# on a Debian-like host. Users pass nixpkgs instead.
#
#   runCommand name env script
#
# Like nixpkgs' runCommand, `env` becomes derivation attributes (so
# `passAsFile` works: Nix itself writes those attributes to files and sets
# `<name>Path`), and the script reaches the builder as a file, so its length
# is not bounded by the kernel's limit on one argument.
#
# With the sandbox on, the host's tools are not in the build environment
# unless the sandbox is given them: `sandboxPaths` is the value for
# `--option sandbox-paths` (nix/tests/run builds that way). Without them a
# sandboxed build stops at Nix's "executing '/bin/sh'", or, where the
# sandbox's /bin/sh is a bare shell (NixOS: busybox), at the check below
# saying what is missing.
{
  system ? builtins.currentSystem,
}:
let
  sandboxPaths = "/bin=/bin /usr=/usr /lib=/lib /lib64=/lib64";
  tools = [
    "mkdir"
    "cp"
    "cat"
    "ln"
  ];
  preflight = ''
    export PATH=/usr/bin:/bin
    for tool in ${toString tools}; do
      command -v "$tool" >/dev/null 2>&1 || {
        echo "host-tools builder: no $tool in /usr/bin or /bin of the build environment." >&2
        echo "It runs the host's coreutils: build with the sandbox off, or with --option sandbox-paths '${sandboxPaths}'; or pass nixpkgs (pkgs = import <nixpkgs> { })." >&2
        exit 1
      }
    done
  '';
in
{
  inherit sandboxPaths;
  runCommand =
    name: env: script:
    derivation (
      env
      // {
        inherit name system;
        builder = "/bin/sh";
        args = [
          "-c"
          "${preflight}. \"$kixScriptPath\""
        ];
        kixScript = script;
        passAsFile = [ "kixScript" ] ++ (env.passAsFile or [ ]);
      }
    );
}
