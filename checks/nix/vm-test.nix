# NixOS VM test: k3s and the kix-operator module on one node.
#
#   nix build .#checks.x86_64-linux.vm-test        (container mode, default)
#   nix build .#checks.x86_64-linux.vm-test-host   (host mode)
#
# The node runs k3s (server, the add-ons that need images disabled) and
# services.kix-operator with k3s's admin kubeconfig. The test checks that the
# bootstrap installed the CRDs and the operator's RBAC, deploys the demo
# cluster (checks/nix/demo-cluster.nix, ConfigMaps only: no image pulls) with
# `kix deploy demo --path <build> --operator --yes`, waits for its objects,
# then edits and deletes them and waits until the operator has restored them
# (drift corrected), and looks at `kix status`, the Activation, the metrics
# and the GC root.
#
# The node also declares the Kix cluster `declared`
# (services.kix-operator.clusters): the boot generation's build is deployed
# by its kix-declare unit, a switch to the specialisation generation2
# deploys that generation's build, switching back rolls back to the first
# (rollbackFrom), re-activating the same build writes nothing, and a
# generation whose plan needs an acceptance the host did not give fails
# switch-to-configuration with the reason in the unit's log (and on a Failed
# `engine: local` record; the previous one stays Active).
{
  pkgs,
  self,
  system,
  mode ? "container",
}:
let
  inherit (pkgs) lib;
  kix = self.packages.${system}.kix;
  cluster = import ./demo-cluster.nix {
    kixLib = self.lib;
    inherit pkgs;
  };
  kubeconfig = "/etc/rancher/k3s/k3s.yaml";
  serviceAccount = "system:serviceaccount:kix-system:kix-operator";
  operatorUnit = if mode == "container" then "podman-kix-operator.service" else "kix-operator.service";
  # Generations of the host-declared Kix cluster: 2 changes a value, 3
  # moves it to another namespace (deleting a Namespace needs acceptance).
  declared =
    args:
    import ./demo-cluster.nix (
      {
        kixLib = self.lib;
        inherit pkgs;
        name = "declared";
        namespace = "kix-decl";
      }
      // args
    );
  generation1 = declared { greeting = "generation one"; };
  generation2 = declared { greeting = "generation two"; };
  generation3 = declared { namespace = "kix-decl-3"; };
in
pkgs.testers.runNixOSTest {
  name = "kix-operator-${mode}";

  nodes.machine =
    { ... }:
    {
      imports = [ self.nixosModules.default ];

      virtualisation = {
        memorySize = 3072;
        diskSize = 8192;
        cores = 2;
        # Registered in the VM's Nix database, as a build copied to the host.
        additionalPaths = [ cluster ];
      };

      services.k3s = {
        enable = true;
        role = "server";
        extraFlags = [
          "--disable coredns"
          "--disable local-storage"
          "--disable metrics-server"
          "--disable servicelb"
          "--disable traefik"
        ];
      };

      services.kix-operator = {
        enable = true;
        inherit mode;
        kubeconfigFile = kubeconfig;
        logFormat = "json";
        settings."resync-interval" = "15s";
        clusters.declared.build = generation1;
      };

      specialisation = {
        generation2.configuration.services.kix-operator.clusters.declared.build = lib.mkForce generation2;
        generation3.configuration.services.kix-operator.clusters.declared.build = lib.mkForce generation3;
      };

      environment.systemPackages = [
        kix
        pkgs.curl
      ];
    };

  testScript = ''
    cluster = "${cluster}"
    kubectl = "k3s kubectl"
    kix = "KUBECONFIG=${kubeconfig} kix"
    container_mode = ${if mode == "container" then "True" else "False"}
    sa = "${serviceAccount}"

    def greeting():
        return machine.succeed(
            f"{kubectl} -n kix-vm get configmap demo-settings -o jsonpath='{{.data.greeting}}'"
        ).strip()

    start_all()
    machine.wait_for_unit("k3s.service")
    machine.wait_until_succeeds(f"{kubectl} get --raw /readyz", timeout=300)

    with subtest("bootstrap: CRDs and least-privilege RBAC"):
        machine.wait_for_unit("kix-operator-bootstrap.service", timeout=600)
        machine.succeed(
            f"{kubectl} wait --for=condition=Established --timeout=60s"
            " crd/activations.kix.run crd/packageinstances.kix.run"
        )
        machine.succeed(f"{kubectl} -n kix-system get serviceaccount kix-operator")
        for check in [
            "watch activations.kix.run",
            "update activations.kix.run --subresource=status",
            "update activations.kix.run --subresource=finalizers",
            "create packageinstances.kix.run",
            "create leases.coordination.k8s.io -n kube-system",
            "create events",
        ]:
            machine.succeed(f"{kubectl} auth can-i {check} --as={sa}")
        rules = machine.succeed(f"{kubectl} get clusterrole kix-operator -o jsonpath='{{.rules}}'")
        assert '"*"' not in rules, f"the records role must not grant wildcards: {rules}"
        # The operator authenticates as its ServiceAccount, not as k3s admin.
        machine.succeed("test -s /var/lib/kix-operator/kubeconfig")
        machine.succeed("grep -q 'token:' /var/lib/kix-operator/kubeconfig")

    with subtest("operator runs (${mode} mode)"):
        machine.wait_for_unit("${operatorUnit}", timeout=300)
        # /readyz answers once the operator reached the API server.
        machine.wait_until_succeeds("curl -sf http://127.0.0.1:8080/readyz", timeout=300)
        machine.succeed("curl -sf http://127.0.0.1:8080/metrics | grep -q kix_operator_leader")
        if container_mode:
            # The container sees the host store (read-only) and nix-store
            # inside it talks to the host's nix-daemon.
            machine.succeed(f"podman exec kix-operator nix-store --check-validity {cluster}")
            mounts = machine.succeed(
                "podman inspect kix-operator"
                " --format '{{range .Mounts}}{{.Destination}}:{{.RW}} {{end}}'"
            )
            assert "/nix/store:false" in mounts.split(), mounts

    with subtest("kix deploy --operator"):
        machine.succeed(f"{kix} build demo --path {cluster}")
        machine.succeed(f"{kix} deploy demo --path {cluster} --operator --yes")
        machine.wait_until_succeeds(
            f"{kubectl} -n kix-vm get configmap demo-settings demo-extra", timeout=300
        )
        assert greeting() == "hello", greeting()
        machine.wait_until_succeeds(
            f"{kubectl} get activations -l kix.run/cluster=demo"
            " -o jsonpath='{.items[*].status.phase}' | grep -qw Active",
            timeout=300,
        )
        machine.succeed(
            f"{kubectl} get activations -l kix.run/cluster=demo"
            " -o jsonpath='{.items[*].spec.engine}' | grep -qw operator"
        )

    with subtest("drift is corrected"):
        machine.succeed(
            f"{kubectl} -n kix-vm patch configmap demo-settings --type merge"
            " -p '{\"data\":{\"greeting\":\"drifted\"}}'"
        )
        machine.wait_until_succeeds(
            f"test \"$({kubectl} -n kix-vm get configmap demo-settings"
            " -o jsonpath='{.data.greeting}')\" = hello",
            timeout=180,
        )
        machine.succeed(f"{kubectl} -n kix-vm delete configmap demo-extra")
        machine.wait_until_succeeds(f"{kubectl} -n kix-vm get configmap demo-extra", timeout=180)

    with subtest("status and GC root"):
        machine.succeed(f"{kix} status demo --operator")
        machine.succeed(f"readlink -f /nix/var/nix/gcroots/kix/demo/* | grep -qx {cluster}")

    def declared_greeting():
        return machine.succeed(
            f"{kubectl} -n kix-decl get configmap demo-settings -o jsonpath='{{.data.greeting}}'"
        ).strip()

    def declared_records():
        return machine.succeed(
            f"{kubectl} get activations -l kix.run/cluster=declared --sort-by=.metadata.creationTimestamp"
            " -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}'"
        ).split()

    with subtest("the boot generation's declared build"):
        machine.wait_for_unit("kix-declare-declared.service", timeout=600)
        assert declared_greeting() == "generation one", declared_greeting()
        assert declared_records() == ["declared-1=Active"], declared_records()
        host = machine.succeed(
            f"{kubectl} get activation declared-1"
            " -o jsonpath='{.metadata.annotations.kix\\.run/declared-by}'"
        ).strip()
        assert host == "machine", host
        machine.succeed(f"{kix} deploy declared --path ${generation1} --operator --yes --dry-run 2>&1"
                        " | grep -q 'is declared by NixOS host machine'")

    with subtest("the same build again writes nothing"):
        machine.succeed("systemctl restart kix-declare-declared.service")
        assert declared_records() == ["declared-1=Active"], declared_records()

    with subtest("switch to generation 2 deploys its build"):
        machine.succeed(
            "/run/current-system/specialisation/generation2/bin/switch-to-configuration test"
        )
        assert declared_greeting() == "generation two", declared_greeting()
        assert declared_records() == ["declared-1=Superseded", "declared-2=Active"], declared_records()

    with subtest("switching back to the boot generation rolls back"):
        machine.succeed("/run/booted-system/bin/switch-to-configuration test")
        assert declared_greeting() == "generation one", declared_greeting()
        assert declared_records()[-1] == "declared-3=Active", declared_records()
        origin = machine.succeed(
            f"{kubectl} get activation declared-3 -o jsonpath='{{.spec.receipt.rollbackFrom}}'"
        ).strip()
        assert origin == "declared-2", origin

    with subtest("a refused generation fails the switch and changes nothing"):
        machine.fail(
            "/run/booted-system/specialisation/generation3/bin/switch-to-configuration test"
        )
        log = machine.succeed("journalctl -u kix-declare-declared.service --no-pager")
        assert "needs acceptance" in log and "delete Namespace/kix-decl" in log, log
        # Recorded as a Failed local record the operator ignores.
        assert declared_records()[-2:] == ["declared-3=Active", "declared-4=Failed"], declared_records()
        engine = machine.succeed(
            f"{kubectl} get activation declared-4 -o jsonpath='{{.spec.engine}}'"
        ).strip()
        assert engine == "local", engine
        assert declared_greeting() == "generation one", declared_greeting()
  '';
}
