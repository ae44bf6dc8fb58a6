# The module in both modes, with every option that adds to a unit (declared
# Kix clusters too), forced as
# NixOS would render it. checks/nix/run evaluates this on a copy of the
# repository: it must succeed for the module as it is and fail for each copy
# of the module with an error planted (a systemd value systemd rejects, a
# string where NixOS wants an int, an option that does not exist, ...).
{ nixpkgsLib }:
let
  common = import ./common.nix { inherit nixpkgsLib; };
  configure =
    cfg:
    (common.nixos [
      {
        services.kix-operator = {
          enable = true;
          kubeconfigFile = "/etc/kix/admin.yaml";
          openFirewall = true;
        }
        // cfg;
      }
    ]).config;
in
builtins.deepSeq (map (cfg: common.rendered (configure cfg)) [
  { mode = "host"; }
  { rbac.useServiceAccount = false; }
  # declared Kix clusters: a build and one declared absent
  {
    clusters.demo = {
      build = import ./demo-cluster.nix {
        kixLib = import ../../nix { };
        inherit (common) pkgs;
      };
      acceptMigrations = [ "migration app" ];
      maxDeletions = 3;
    };
    clusters.retired.absent = "prune";
  }
  # several teams, one operator
  {
    tenants = (import ../../nix { }).mkTenants {
      inherit (common) pkgs;
      platform.users = [ "system:serviceaccount:kix-system:kix-operator" ];
      clusters.team-a = {
        groups = [ "team-a" ];
        serviceAccount = {
          namespace = "team-a";
          name = "kix";
        };
      };
    };
    defaultServiceAccount = "team-a/kix";
  }
]) "evaluated"
