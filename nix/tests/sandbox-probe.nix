# Built by nix/tests/run with the same options as the fixtures: it fails
# unless the build really ran in the sandbox (Nix falls back to no sandbox
# silently where it cannot make one, unless sandbox-fallback is false), so a
# green run means the fixtures and examples were built sandboxed.
{
  system ? builtins.currentSystem,
}:
(import ./host-tools.nix { inherit system; }).runCommand "kix-sandbox-probe" { } ''
  if [ -e /nix/var/nix/db ]; then
    echo "not sandboxed: the host's /nix/var/nix is visible to the build" >&2
    exit 1
  fi
  echo sandboxed > "$out"
''
