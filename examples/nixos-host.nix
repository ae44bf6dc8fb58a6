# A NixOS host that runs k3s and the kix operator and declares the example
# Kix clusters (./default.nix): `nixos-rebuild switch` deploys their builds
# through the operator, `nixos-rebuild switch --rollback` (or booting an
# older generation) rolls them back. A NixOS module; in a flake:
#
#   nixosConfigurations.edge = nixpkgs.lib.nixosSystem {
#     system = "x86_64-linux";
#     specialArgs = { inherit kix; };        # the kix flake
#     modules = [ kix.nixosModules.default ./nixos-host.nix ./hardware.nix ];
#   };
#
# checks/nix evaluates it with the real module system (checks/nix/example.nix).
{ pkgs, kix, ... }:
let
  examples = import ./default.nix {
    inherit pkgs;
    kix = kix.lib;
  };
in
{
  networking.hostName = "edge";

  services.k3s = {
    enable = true;
    role = "server";
  };

  services.kix-operator = {
    enable = true;
    # The bootstrap deploys the operator's CRDs and RBAC with it; the
    # kix-declare units plan and write records with it.
    kubeconfigFile = "/etc/rancher/k3s/k3s.yaml";

    clusters.infra.build = examples.kixClusters.infra;
    clusters.apps = {
      # The next release (examples.next.apps) crosses the db migration
      # 1.0.0 -> 2.0.0; this host accepts it, and nothing else.
      build = examples.kixClusters.apps;
      acceptMigrations = [ "migration db" ];
      waitTimeout = 900;
    };
    # A Kix cluster this host no longer runs, pruned through its deletion
    # budget. (Deleting the entry instead would leave it as it is.)
    clusters.legacy-tools.absent = "prune";
  };
}
