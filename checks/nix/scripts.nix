# The shell and Python scripts the module and the VM tests generate, as text
# (from the stand-in evaluation), for checks/nix/run to syntax-check:
#
#   nix eval --raw -f checks/nix/scripts.nix shell.bootstrap --arg nixpkgsLib ... | bash -n
{
  system ? "x86_64-linux",
  nixpkgsLib,
}:
let
  common = import ./common.nix { inherit system nixpkgsLib; };
  eval = cfg: (common.nixos [ { services.kix-operator = cfg; } ]).config;
  base = {
    enable = true;
    kubeconfigFile = "/etc/rancher/k3s/k3s.yaml";
  };
  sa = eval base;
  copyContainer = eval (base // { rbac.useServiceAccount = false; });
  copyHost = eval (
    base
    // {
      mode = "host";
      rbac.useServiceAccount = false;
    }
  );
  checks = common.self.checks.${system};
in
{
  shell = {
    # The unit runs this file with bash.
    bootstrap = assert common.lib.hasSuffix "-kix-operator-bootstrap.sh" sa.systemd.services.kix-operator-bootstrap.serviceConfig.ExecStart;
      builtins.readFile ../../nixos-modules/kix-operator-bootstrap.sh;
    kubeconfig-copy-container = builtins.head copyContainer.systemd.services.podman-kix-operator.serviceConfig.ExecStartPre;
    # ExecStartPre "+<script>": the + runs it as root.
    kubeconfig-copy-host = builtins.substring 1 (-1) (builtins.head copyHost.systemd.services.kix-operator.serviceConfig.ExecStartPre);
    image-fakeroot = "set -e\n" + common.self.packages.${system}.operator-image.stubArgs.fakeRootCommands;
    check-nix-lib-nixpkgs = checks.nix-lib-nixpkgs.text;
    check-cargo-fmt = checks.cargo-fmt.text;
    check-nix-parse = checks.nix-parse.text;
  };
  python = {
    vm-test = checks.vm-test.stubArgs.testScript;
    vm-test-host = checks.vm-test-host.stubArgs.testScript;
  };
}
