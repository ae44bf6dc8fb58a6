#!/usr/bin/env python3
"""Generates the benchmark's workloads: the same objects for every tool.

    gen.py OUT_DIR OBJECTS [--packages 10] [--scale]

For each variant (v0: base; v1: 10 % of the objects changed; v2: v1 with
10 % of v0's objects removed) and each tool prefix it writes:

    OUT/<variant>/kix-tree/   kix.json, packages/pNN/{package.json,resources/*.yaml}
    OUT/<variant>/<tool>/     plain YAML (pNN/00-namespace.yaml, configmaps, ...)
    OUT/<variant>/helm-chart/ a Helm chart whose templates hold the same YAML

Every package owns one namespace (<tool>-pNN). Inside a package the objects
are 60 % ConfigMaps, 25 % Services (headless: the local control plane has a
/24 service range), 15 % Deployments (1 replica; KWOK's fake nodes run the
pods). In package order the objects are
ConfigMaps, Services, Deployments; object k of a package (0-based) changes in
v1 when k % 10 == 0 and is removed in v2 when k % 10 == 5: exactly 10 % each,
spread over the three kinds roughly in their proportions.

With --scale (the 20,000 and 50,000 runs) the objects are ConfigMaps only,
so the controllers do no work and the steps time kix alone: object k of a
package changes in v1 when k % 100 == 0 (1 %), and v2 is v1 without the
second half of the packages (their namespaces and objects: a prune of half).

No third-party modules: the YAML is written by hand (block style, quoted
strings), which every reader (kix, kubectl, kapp, Helm) parses the same way.
"""

import json
import os
import shutil
import sys

TOOLS = ["kix", "kubectl", "helm", "kapp", "ssa"]
MIX = (0.60, 0.25, 0.15)  # ConfigMaps, Services, Deployments
CONFIG_TEXT = (
    "# generated for the kix benchmark\\n"
    "log_level: info\\nlisten: 0.0.0.0:8080\\n"
    "upstreams:\\n  - http://backend-a.svc:8080\\n  - http://backend-b.svc:8080\\n"
    "cache_ttl_seconds: 300\\nfeature_flags: [alpha, beta]\\n"
)


def package_objects(count):
    """[(kind, index-within-kind)] in package order: CMs, Services, Deployments."""
    n_cm = round(count * MIX[0])
    n_svc = round(count * MIX[1])
    n_dep = count - n_cm - n_svc
    return (
        [("ConfigMap", i) for i in range(n_cm)]
        + [("Service", i) for i in range(n_svc)]
        + [("Deployment", i) for i in range(n_dep)]
    ), n_dep


def q(s):
    return json.dumps(s)


def configmap(ns, tool, i, rev):
    return f"""apiVersion: v1
kind: ConfigMap
metadata:
  name: cm-{i:04d}
  namespace: {ns}
  labels:
    bench.kix.run/tool: {tool}
    app.kubernetes.io/part-of: bench
data:
  config.yaml: "{CONFIG_TEXT}"
  revision: {q(str(rev))}
"""


def service(ns, tool, i, rev, n_dep):
    ann = f"\n  annotations:\n    bench.kix.run/revision: {q(str(rev))}" if rev > 1 else ""
    return f"""apiVersion: v1
kind: Service
metadata:
  name: svc-{i:04d}
  namespace: {ns}
  labels:
    bench.kix.run/tool: {tool}
    app.kubernetes.io/part-of: bench{ann}
spec:
  clusterIP: None
  selector:
    app: app-{i % max(n_dep, 1):04d}
  ports:
    - name: http
      port: 80
      targetPort: 8080
"""


def deployment(ns, tool, i, rev):
    return f"""apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i:04d}
  namespace: {ns}
  labels:
    bench.kix.run/tool: {tool}
    app.kubernetes.io/part-of: bench
spec:
  replicas: 1
  selector:
    matchLabels:
      app: app-{i:04d}
  template:
    metadata:
      labels:
        app: app-{i:04d}
    spec:
      containers:
        - name: app
          image: registry.local/bench/app:1.0.0
          ports:
            - containerPort: 8080
          env:
            - name: REVISION
              value: {q(str(rev))}
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
"""


def namespace(ns, tool):
    return f"""apiVersion: v1
kind: Namespace
metadata:
  name: {ns}
  labels:
    bench.kix.run/tool: {tool}
"""


def render(tool, variant, per_package, package, scale=False):
    """{file name: yaml} for one package of one tool and variant."""
    ns = f"{tool}-p{package:02d}"
    objs, n_dep = package_objects(per_package)
    if scale:
        files = {"00-namespace.yaml": [namespace(ns, tool)], "configmaps.yaml": []}
        for k in range(per_package):
            rev = 2 if variant >= 1 and k % 100 == 0 else 1
            files["configmaps.yaml"].append(configmap(ns, tool, k, rev))
        return {name: "---\n".join(docs) for name, docs in files.items()}
    files = {"00-namespace.yaml": [namespace(ns, tool)], "configmaps.yaml": [],
             "services.yaml": [], "deployments.yaml": []}
    for k, (kind, i) in enumerate(objs):
        if variant == 2 and k % 10 == 5:
            continue
        rev = 2 if variant >= 1 and k % 10 == 0 else 1
        if kind == "ConfigMap":
            files["configmaps.yaml"].append(configmap(ns, tool, i, rev))
        elif kind == "Service":
            files["services.yaml"].append(service(ns, tool, i, rev, n_dep))
        else:
            files["deployments.yaml"].append(deployment(ns, tool, i, rev))
    return {name: "---\n".join(docs) for name, docs in files.items() if docs}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def main():
    args = sys.argv[1:]
    packages = 10
    scale = "--scale" in args
    if scale:
        args.remove("--scale")
    if "--packages" in args:
        at = args.index("--packages")
        packages = int(args[at + 1])
        del args[at:at + 2]
    out, total = args[0], int(args[1])
    if total % packages:
        sys.exit(f"gen.py: {total} objects do not split into {packages} packages")
    per_package = total // packages
    shutil.rmtree(out, ignore_errors=True)
    counts = {}
    for variant in (0, 1, 2):
        vdir = os.path.join(out, f"v{variant}")
        kept = range(packages // 2) if scale and variant == 2 else range(packages)
        names = [f"p{p:02d}" for p in range(packages)]
        write(os.path.join(vdir, "kix-tree", "kix.json"), json.dumps(
            {"format": 1, "cluster": "bench", "packages": [names[p] for p in kept], "settings": {}}, indent=2) + "\n")
        write(os.path.join(vdir, "helm-chart", "Chart.yaml"),
              f"apiVersion: v2\nname: bench\nversion: 0.1.{variant}\nappVersion: \"{variant}\"\n")
        n = 0
        for tool in TOOLS:
            for p in kept:
                files = render(tool, variant, per_package, p, scale)
                if tool == "kix":
                    pdir = os.path.join(vdir, "kix-tree", "packages", names[p])
                    write(os.path.join(pdir, "package.json"), json.dumps(
                        {"name": names[p], "version": f"1.0.{variant}", "dependsOn": [],
                         "namespace": f"kix-p{p:02d}"}) + "\n")
                    for name, text in files.items():
                        write(os.path.join(pdir, "resources", name), text)
                    n += sum(t.count("\nkind: ") + t.startswith("kind: ") for t in files.values())
                elif tool == "helm":
                    for name, text in files.items():
                        write(os.path.join(vdir, "helm-chart", "templates", f"{names[p]}-{name}"), text)
                else:
                    for name, text in files.items():
                        write(os.path.join(vdir, tool, names[p], name), text)
        counts[f"v{variant}"] = n
    write(os.path.join(out, "counts.json"), json.dumps(
        {"objects": total, "packages": packages, "namespaces": packages, "documents": counts,
         "scale": scale}) + "\n")


if __name__ == "__main__":
    main()
