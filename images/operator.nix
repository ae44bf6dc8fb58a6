# The kix operator's OCI image (nixpkgs dockerTools, layered).
#
#   nix build .#operator-image && podman load < result
#
# Contents: kix-operator (the entrypoint), Nix (for `nix-store`: the operator
# checks and realises the store paths that Activations name, and keeps GC
# roots for them), CA certificates, and /etc/passwd + /etc/group with a
# non-root user (uid/gid 65532 unless overridden).
#
# The image is meant to run with the host's /nix/store mounted read-only over
# its own and the host's nix-daemon socket mounted (NIX_REMOTE=daemon), so the
# operator sees exactly the store it deploys from. Mounting the host store
# hides the image's own store: every store path the image uses (its
# `storeRoots` and their closures) must then be valid in the host store.
# The NixOS module adds them to the system closure
# (system.extraDependencies); on another host, copy their closures into the
# host store first (`nix copy`, or build the same flake output there).
#
# Own-store mode (`ownStore = true`; the flake's operator-image-own-store,
# the default for clusters whose nodes have no Nix: EKS, GKE, AKS, ...): the
# operator keeps the builds it deploys in a store of its own,
# `local?root=/var/lib/kix` (KIX_STORE; kix-operator --store), fetched from
# the binary caches it is given (--substituter, --trusted-public-key), and
# its GC roots there. Nothing of the host is mounted: /var/lib/kix is a
# volume (kix.lib.mkOperatorInstall: a PersistentVolumeClaim), the image's
# own /nix/store stays visible and runs the operator.
#
# Mounts the operator expects in host-store mode (the default):
#   /nix/store                    host store, read-only
#   /nix/var/nix/daemon-socket    host nix-daemon socket directory
#   /nix/var/nix/gcroots/kix      GC roots directory, same path on the host
#                                 (Nix registers indirect roots by their path)
#   a kubeconfig (--kubeconfig), unless it runs in-cluster
{
  lib,
  dockerTools,
  kix-operator,
  nix,
  cacert,
  name ? "kix-operator",
  # null: the tag is the image's output hash (what the NixOS module wants).
  tag ? null,
  uid ? 65532,
  gid ? 65532,
  userName ? "kix",
  # true: the operator's own store under /var/lib/kix (see the top).
  ownStore ? false,
}:
let
  passwd = dockerTools.fakeNss.override {
    extraPasswdLines = [
      "${userName}:x:${toString uid}:${toString gid}:kix operator:/home/${userName}:/sbin/nologin"
    ];
    extraGroupLines = [ "${userName}:x:${toString gid}:" ];
  };

  storeRoot = "/var/lib/kix";
  # Where the operator's store lives: the host's through its daemon, or
  # its own under storeRoot (GC roots inside it, the operator's default).
  storeEnv =
    if ownStore then
      [ "KIX_STORE=local?root=${storeRoot}" ]
    else
      [
        "NIX_REMOTE=daemon"
        "KIX_GCROOTS_DIR=/nix/var/nix/gcroots/kix"
      ];

  # Everything the image's root refers to; see the comment at the top.
  storeRoots = [
    kix-operator
    nix
    cacert
    passwd
  ];

  image = dockerTools.buildLayeredImage {
    inherit name tag;
    contents = storeRoots;
    # /tmp for tools that want one (1777); the user's home, owned by it, so
    # Nix does not warn about $HOME. fakeroot makes chown stick in the layer.
    fakeRootCommands = ''
      mkdir -p ./tmp ./home/${userName}
      chmod 1777 ./tmp
      chown ${toString uid}:${toString gid} ./home/${userName}
      chmod 0700 ./home/${userName}
    ''
    # The store's mount point, the user's even without a volume.
    + lib.optionalString ownStore ''
      mkdir -p .${storeRoot}
      chown ${toString uid}:${toString gid} .${storeRoot}
    '';
    config = {
      Entrypoint = [ "${kix-operator}/bin/kix-operator" ];
      User = "${toString uid}:${toString gid}";
      WorkingDir = "/home/${userName}";
      Env = storeEnv ++ [
        "SSL_CERT_FILE=${cacert}/etc/ssl/certs/ca-bundle.crt"
        "PATH=${
          lib.makeBinPath [
            kix-operator
            nix
          ]
        }:/bin"
        "HOME=/home/${userName}"
        # Writable even with a read-only root filesystem (podman --read-only
        # mounts a tmpfs on /tmp).
        "XDG_CACHE_HOME=/tmp/.cache"
      ];
      # --metrics-addr: /metrics, /healthz, /readyz
      ExposedPorts."8080/tcp" = { };
      Labels = {
        "org.opencontainers.image.title" = "kix-operator";
        "org.opencontainers.image.description" =
          "kix operator: keeps the current Activation of each Kix cluster applied";
        "org.opencontainers.image.source" = "https://github.com/kix-run/kix";
        "org.opencontainers.image.licenses" = "Apache-2.0";
        "org.opencontainers.image.version" = kix-operator.version or "unknown";
      };
    };
  };
in
# `storeRoots`, `uid`, `gid` and `ownStore` are what a runner of the image
# needs to know (the NixOS module reads them); the image itself is unchanged.
image
// {
  inherit storeRoots uid gid ownStore;
  passthru = (image.passthru or { }) // {
    inherit storeRoots uid gid ownStore;
  };
}
