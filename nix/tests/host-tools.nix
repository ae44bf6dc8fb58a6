# A runCommand-style builder made of the host's own tools (/bin/sh, coreutils),
# standing in for nixpkgs in the library tests. Nix runs it without a sandbox
# (sandbox = false), so the builder sets its own PATH.
#
#   runCommand name env script
#
# Like nixpkgs' runCommand, `env` becomes derivation attributes (so
# `passAsFile` works: Nix itself writes those attributes to files and sets
# `<name>Path`), and the script reaches the builder as a file, so its length
# is not bounded by the kernel's limit on one argument.
{
  system ? builtins.currentSystem,
}:
{
  runCommand =
    name: env: script:
    derivation (
      env
      // {
        inherit name system;
        builder = "/bin/sh";
        args = [
          "-c"
          "export PATH=/usr/bin:/bin; . \"$kixScriptPath\""
        ];
        kixScript = script;
        passAsFile = [ "kixScript" ] ++ (env.passAsFile or [ ]);
      }
    );
}
