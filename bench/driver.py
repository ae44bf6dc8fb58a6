#!/usr/bin/env python3
"""The benchmark's measuring loop (bench/run calls it; stdlib only).

    driver.py --work DIR --sizes 1000,5000 --runs 3 --peer-runs 1 --tools ssa,kix,kubectl,helm,kapp
              --kubeconfig K --kix BIN --kubectl BIN [--helm BIN] [--kapp BIN] --ssa-loop BIN
              [--audit AUDIT_LOG]

For each size it generates the workloads (gen.py), then, run after run, takes
each tool through the same sequence on the same control plane:

    first    deploy v0 into empty namespaces
    noop     deploy v0 again
    plan     plan / diff v1 (10 % changed) against the live v0
    change   deploy v1
    prune    deploy v2 (v1 without 10 % of the objects)

From --scale-from objects on (default 10,000) the workload is ConfigMaps
only (gen.py --scale) and the sequence is the one of issue 20, kix and the
raw SSA loop:

    first    deploy v0 into empty namespaces
    noop     deploy v0 again
    plan     plan v1 (1 % changed)
    change   deploy v1
    prune    deploy v2 (v1 without half of its packages: half the objects)
    rollback roll back to v1, across the prune (the half comes back)
    status   kix status
    history  kix history

A step that fails there is recorded as failed (its exit and the error's last
line) and the sequence goes on.

It deletes the tool's namespaces and records before the next tool. Between
steps it waits, untimed, until the tool's Deployments are available (the
time from a deploy's start until then is recorded as "ready") and then until
the control plane is quiet, so a step never competes with the controllers'
work left over from the previous one. Every command runs under
/usr/bin/time -v (peak RSS). DIR/results.json is rewritten after each tool's
sequence, so an interrupted run keeps what it measured.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = ["first", "noop", "plan", "change", "prune"]


def log(msg):
    print(f"bench: {msg}", file=sys.stderr, flush=True)


class Bench:
    def __init__(self, args):
        self.a = args
        self.work = args.work
        self.logdir = os.path.join(self.work, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.results_path = os.path.join(self.work, "results.json")
        self.results = {"runs": []}
        self.env = dict(os.environ, KUBECONFIG=args.kubeconfig,
                        KIX_GCROOTS_DIR=os.path.join(self.work, "gcroots"),
                        KIX_OFFLINE="1", NO_COLOR="1", TERM="dumb")
        self.env.pop("KIX_LOG", None)
        self.kubectl = [args.kubectl, "--kubeconfig", args.kubeconfig]

    # --- running commands -------------------------------------------------

    def sh(self, cmd, check=True, quiet=True, env=None):
        """Untimed helper command."""
        r = subprocess.run(cmd, env=env or self.env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
        if not quiet:
            sys.stderr.write(r.stdout)
        return r

    def timed_or_failed(self, label, cmd, env=None, ok=(0,)):
        """timed(), but a failure is a result (the scale sequence goes on)."""
        try:
            return self.timed(label, cmd, env=env, ok=ok)
        except StepFailed as e:
            log(f"{label}: failed: {e.error}")
            return e.result

    def timed(self, label, cmd, env=None, ok=(0,)):
        """Runs cmd under /usr/bin/time -v; returns wall seconds, peak RSS (MB), output."""
        tfile = os.path.join(self.logdir, "time.txt")
        logf = os.path.join(self.logdir, f"{label}.log")
        audit0 = self.audit_offset()
        busy0, cp0 = machine_busy_seconds(), self.control_plane_cpu()
        with open(logf, "w") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            t0 = time.monotonic()
            rc = subprocess.call(["/usr/bin/time", "-v", "-o", tfile] + cmd,
                                 env=env or self.env, stdout=out, stderr=subprocess.STDOUT)
            wall = time.monotonic() - t0
        with open(tfile) as f:
            tv = f.read()
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tv)
        rss = int(m.group(1)) / 1024 if m else None
        # CPU seconds during the step: the tool's, the control plane's, and
        # everything else's (other people's work on a shared machine shows
        # here, and slows the step down).
        tool_cpu = sum(float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", tv))
        busy = machine_busy_seconds() - busy0
        cp = self.control_plane_cpu() - cp0
        cpu = {"tool": round(tool_cpu, 2), "control_plane": round(cp, 2),
               "others": round(max(busy - cp - tool_cpu, 0.0), 2)}
        with open(logf) as f:
            output = f.read()
        result = {"wall": round(wall, 3), "rss_mb": round(rss, 1) if rss else None, "cpu": cpu,
                  "t0": t0, "output": output, "audit": [audit0, self.audit_offset()]}
        if rc not in ok:
            errors = [l for l in output.splitlines() if l.startswith("error")]
            result["failed"] = {"exit": rc, "error": (errors or output.splitlines() or [""])[-1][:300]}
            raise StepFailed(f"{label}: exit {rc}; see {logf}:\n{output[-3000:]}", result)
        return result

    def control_plane_cpu(self):
        """CPU seconds the control plane's processes have used so far (their
        pids are in the control plane's directory, beside the audit log)."""
        if not self.a.audit:
            return 0.0
        pids = os.path.join(os.path.dirname(self.a.audit), "pids")
        total = 0
        for name in os.listdir(pids) if os.path.isdir(pids) else []:
            try:
                with open(os.path.join(pids, name)) as f:
                    pid = f.read().strip()
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
            except (OSError, ValueError, IndexError):
                pass
        return total / os.sysconf("SC_CLK_TCK")

    def audit_offset(self):
        """Where the control plane's audit log ends now (bench/audit.py profiles a step)."""
        try:
            return os.path.getsize(self.a.audit) if self.a.audit else None
        except OSError:
            return None

    def settle(self, tool, since):
        """Waits until the tool's Deployments are available (returns the seconds
        since `since`), then until the control plane is quiet."""
        self.sh([self.a.ssa_loop, "--kubeconfig", self.a.kubeconfig, "--wait-only",
                 "--selector", f"bench.kix.run/tool={tool}", "--timeout", "20m"])
        ready = round(time.monotonic() - since, 3)
        self.quiet()
        return ready

    def quiet(self, limit=60):
        """Waits until the controllers are done with the last step's objects
        (EndpointSlices, ReplicaSets, garbage collection): until the audit log,
        which has a line per request, grows by less than ~10 requests a second
        for two seconds in a row."""
        if not self.a.audit:
            time.sleep(2)
            return
        deadline = time.monotonic() + limit
        calm = 0
        last = self.audit_offset() or 0
        while time.monotonic() < deadline and calm < 2:
            time.sleep(1)
            now = self.audit_offset() or 0
            calm = calm + 1 if now - last < 15000 else 0
            last = now

    def cleanup(self, tool):
        """Deletes the tool's namespaces and state; waits until they are gone."""
        k = self.kubectl
        sel = f"bench.kix.run/tool={tool}"
        self.sh(k + ["delete", "namespace", "-l", sel, "--wait=false", "--ignore-not-found"])
        if tool == "kix":
            for res in ("activations.kix.run", "packageinstances.kix.run"):
                self.sh(k + ["delete", res, "--all", "--ignore-not-found", "--wait=false"], check=False)
            self.sh(["rm", "-rf", os.path.join(self.work, "gcroots")])
        elif tool == "kubectl":
            self.sh(k + ["delete", "applysets.bench.kix.run", "kubectl-bench", "--ignore-not-found"], check=False)
        elif tool == "helm":
            self.sh(k + ["delete", "namespace", "helm-bench", "--ignore-not-found", "--wait=false"])
        elif tool == "kapp":
            self.sh(k + ["delete", "namespace", "kapp-bench", "--ignore-not-found", "--wait=false"])
        t0 = time.monotonic()
        deadline = t0 + 900
        while time.monotonic() < deadline:
            r = self.sh(k + ["get", "namespace", "-o", "name", "-l", sel], check=False)
            extra = ""
            if tool in ("helm", "kapp"):
                extra = self.sh(k + ["get", "namespace", f"{tool}-bench", "-o", "name",
                                     "--ignore-not-found"], check=False).stdout.strip()
            if not r.stdout.strip() and not extra and r.returncode == 0:
                if time.monotonic() - t0 > 2:
                    log(f"cleaned up {tool} in {time.monotonic() - t0:.0f}s")
                self.quiet()
                return
            time.sleep(1)
        raise RuntimeError(f"namespaces of {tool} still there after 15 minutes")

    # --- tools ------------------------------------------------------------

    def prepare(self, tool):
        k = self.kubectl
        if tool == "kubectl":
            # A pre-made cluster-scoped parent, as `kubectl apply --applyset`
            # requires for a custom resource parent.
            self.sh(k + ["apply", "--server-side", "-f", os.path.join(HERE, "manifests", "applyset-parent.yaml")])
            self.sh(k + ["wait", "--for", "condition=Established", "crd/applysets.bench.kix.run"])
            parent = ("apiVersion: bench.kix.run/v1\nkind: ApplySet\nmetadata:\n  name: kubectl-bench\n"
                      "  labels:\n    applyset.kubernetes.io/id: " + applyset_id("kubectl-bench", "", "ApplySet",
                                                                                 "bench.kix.run") + "\n"
                      "  annotations:\n    applyset.kubernetes.io/tooling: kubectl/" + self.a.kubectl_version + "\n"
                      "    applyset.kubernetes.io/contains-group-kinds: \"\"\n")
            subprocess.run(k + ["apply", "--server-side", "-f", "-"], input=parent, text=True, check=True,
                           stdout=subprocess.DEVNULL, env=self.env)
        elif tool == "kapp":
            self.sh(k + ["create", "namespace", "kapp-bench"])

    def deploy_cmd(self, tool, d, variant):
        """(command, env, accepted exit codes) deploying `variant` of workload dir `d`."""
        a = self.a
        v = os.path.join(d, variant)
        if tool == "kix":
            return ([a.kix, "deploy", "bench", "--path", self.store[d][variant], "--yes",
                     "--timeout", "30m"], None, (0,))
        if tool == "kubectl":
            return ([a.kubectl, "--kubeconfig", a.kubeconfig, "apply", "--server-side", "--prune",
                     "--applyset=applysets.bench.kix.run/kubectl-bench", "-R", "-f", os.path.join(v, "kubectl")],
                    dict(self.env, KUBECTL_APPLYSET="true"), (0,))
        if tool == "helm":
            return ([a.helm, "upgrade", "--install", "bench", os.path.join(v, "helm-chart"),
                     "-n", "helm-bench", "--create-namespace", "--kubeconfig", a.kubeconfig],
                    dict(self.env, HELM_CACHE_HOME=os.path.join(self.work, "helm", "cache"),
                         HELM_CONFIG_HOME=os.path.join(self.work, "helm", "config"),
                         HELM_DATA_HOME=os.path.join(self.work, "helm", "data")), (0,))
        if tool == "kapp":
            return ([a.kapp, "deploy", "-a", "bench", "-n", "kapp-bench", "-f", os.path.join(v, "kapp"),
                     "--kubeconfig", a.kubeconfig, "-y", "--wait=false", "--tty=false", "--color=false"],
                    None, (0,))
        if tool == "ssa":
            return ([a.ssa_loop, "--kubeconfig", a.kubeconfig, "--concurrency", "32",
                     os.path.join(v, "ssa")], None, (0,))
        raise ValueError(tool)

    def plan_cmd(self, tool, d, variant):
        a = self.a
        v = os.path.join(d, variant)
        if tool == "kix":
            return [a.kix, "plan", "bench", "--path", self.store[d][variant]], (0,)
        if tool == "kubectl":
            # A field manager of its own with --force-conflicts: the diff shows
            # exactly the changed fields (the applyset label stays kubectl's).
            return [a.kubectl, "--kubeconfig", a.kubeconfig, "diff", "--server-side", "--force-conflicts",
                    "-R", "-f", os.path.join(v, "kubectl")], (0, 1)
        if tool == "kapp":
            return [a.kapp, "deploy", "-a", "bench", "-n", "kapp-bench", "-f", os.path.join(v, "kapp"),
                    "--kubeconfig", a.kubeconfig, "--diff-run", "--tty=false", "--color=false"], (0,)
        return None, None  # helm: diff is a plugin (helm-diff); ssa: nothing to plan

    # --- the sequence ------------------------------------------------------

    def run_scale(self, tool, d, size, run):
        """The scale sequence (issue 20): ConfigMaps only, nothing to wait for."""
        label = f"{size}-{tool}-r{run}"
        self.cleanup(tool)
        self.prepare(tool)
        rec = {"size": size, "tool": tool, "run": run, "scale": True, "steps": {}}
        a = self.a
        if tool == "kix":
            dep = lambda v: [a.kix, "deploy", "bench", "--path", self.store[d][v], "--yes", "--timeout", "30m"]
            seq = [("first", dep("v0")), ("noop", dep("v0")),
                   ("plan", [a.kix, "plan", "bench", "--path", self.store[d]["v1"]]),
                   ("change", dep("v1")),
                   # Half the objects and five Namespaces: beyond the default
                   # deletion budget, and destructive, so both are accepted.
                   ("prune", dep("v2") + ["--accept-deletions", "--accept-migrations"]),
                   ("rollback", [a.kix, "rollback", "bench", "--yes", "--timeout", "30m",
                                 "--accept-deletions", "--accept-migrations"]),
                   ("status", [a.kix, "status", "bench"]),
                   ("history", [a.kix, "history", "bench"])]
        elif tool == "ssa":
            seq = [(step, self.deploy_cmd(tool, d, v)[0]) for step, v in
                   (("first", "v0"), ("noop", "v0"), ("change", "v1"))]
        else:
            log(f"leaving out {tool} at {size:,}: the scale sequence runs kix and the raw SSA loop")
            return
        for step, cmd in seq:
            # kix status exits non-zero when an object is not Ready; the
            # time is what is measured.
            ok = (0, 1) if step == "status" else (0,)
            r = self.timed_or_failed(f"{label}-{step}", cmd, ok=ok)
            if tool == "ssa" and step == "first":
                m = re.search(r"applied \d+ objects in ([\d.]+)s", r["output"])
                if m:
                    r["wall"] = float(m.group(1))
            self.quiet()
            rec["steps"][step] = {k: v for k, v in r.items() if k in ("wall", "rss_mb", "cpu", "audit", "failed")}
            log(f"{label} {step}: {r['wall']:.2f}s" + (f", {r['rss_mb']:.0f} MB" if r["rss_mb"] else "")
                + (" FAILED" if "failed" in r else ""))
        if tool == "kix":
            rec["kix_counts"] = self.kix_record_summary()
        self.results["runs"].append(rec)
        self.save()
        self.cleanup(tool)

    def run_tool(self, tool, d, size, run):
        if size >= self.a.scale_from:
            return self.run_scale(tool, d, size, run)
        label = f"{size}-{tool}-r{run}"
        self.cleanup(tool)
        self.prepare(tool)
        rec = {"size": size, "tool": tool, "run": run, "steps": {}}
        seq = [("first", "v0"), ("noop", "v0"), ("plan", "v1"), ("change", "v1"), ("prune", "v2")]
        for step, variant in seq:
            if step == "plan":
                cmd, ok = self.plan_cmd(tool, d, variant)
                if cmd is None:
                    continue
                r = self.timed(f"{label}-{step}", cmd, ok=ok)
            else:
                if tool == "ssa" and step == "prune":
                    continue  # the loop only applies
                cmd, env, ok = self.deploy_cmd(tool, d, variant)
                if tool == "ssa" and step == "first":
                    cmd = cmd[:1] + ["--wait"] + cmd[1:]
                r = self.timed(f"{label}-{step}", cmd, env=env, ok=ok)
                if tool == "ssa" and step == "first":
                    applied = float(re.search(r"applied \d+ objects in ([\d.]+)s", r["output"]).group(1))
                    ready = float(re.search(r"ready in ([\d.]+)s", r["output"]).group(1))
                    rec["steps"]["first_ready"] = {"wall": ready, "rss_mb": r["rss_mb"]}
                    r["wall"] = applied
                    self.quiet()
                else:
                    r["ready"] = self.settle(tool, r["t0"])
            rec["steps"][step] = {k: v for k, v in r.items() if k in ("wall", "rss_mb", "cpu", "ready", "audit")}
            log(f"{label} {step}: {r['wall']:.2f}s"
                + (f" (ready {r['ready']:.2f}s)" if "ready" in r else "")
                + (f", {r['rss_mb']:.0f} MB" if r["rss_mb"] else ""))
        if tool == "kix":
            rec["kix_counts"] = self.kix_record_summary()
        self.results["runs"].append(rec)
        self.save()
        self.cleanup(tool)

    def kix_record_summary(self):
        """The messages of kix's records (apply time as kix measured it)."""
        r = self.sh(self.kubectl + ["get", "activations.kix.run", "-o",
                                    "jsonpath={range .items[*]}{.metadata.name}: {.status.message}{\"\\n\"}{end}"],
                    check=False)
        return r.stdout.strip().splitlines()

    def save(self):
        with open(self.results_path + ".tmp", "w") as f:
            json.dump(self.results, f, indent=1)
        os.replace(self.results_path + ".tmp", self.results_path)

    def main(self):
        a = self.a
        self.store = {}
        tools = a.tools.split(",")
        self.results["config"] = {"sizes": a.sizes, "runs": a.runs, "peer_runs": a.peer_runs, "tools": tools,
                                  "scale_from": a.scale_from}
        for size in [int(s) for s in a.sizes.split(",")]:
            d = os.path.join(self.work, f"workload-{size}")
            log(f"generating {size} objects in {d}")
            subprocess.check_call([sys.executable, os.path.join(HERE, "gen.py"), d, str(size)]
                                  + (["--scale"] if size >= a.scale_from else []))
            # kix deploys store paths (what Nix builds): the trees are added
            # to the store once, untimed, as a build would have put them there.
            self.store[d] = {}
            for variant in ("v0", "v1", "v2"):
                out = self.sh(["nix-store", "--add", os.path.join(d, variant, "kix-tree")]).stdout.strip()
                self.store[d][variant] = out
            for run in range(1, max(a.runs, a.peer_runs) + 1):
                # Rotate the order so no tool always runs first (cold caches)
                # or right after the heaviest one.
                order = tools[(run - 1) % len(tools):] + tools[:(run - 1) % len(tools)]
                for tool in order:
                    limit = a.runs if tool in ("kix", "ssa") else a.peer_runs
                    if run <= limit:
                        self.run_tool(tool, d, size, run)


class StepFailed(RuntimeError):
    def __init__(self, message, result):
        super().__init__(message)
        self.result = result
        self.error = result["failed"]["error"]


def machine_busy_seconds():
    """CPU seconds all cores have spent not idle since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def applyset_id(name, namespace, kind, group):
    import base64
    import hashlib
    digest = hashlib.sha256(f"{name}.{namespace}.{kind}.{group}".encode()).digest()
    return "applyset-" + base64.urlsafe_b64encode(digest).decode().rstrip("=") + "-v1"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--sizes", default="1000,5000")
    p.add_argument("--runs", type=int, default=3, help="runs of kix and the raw SSA loop")
    p.add_argument("--peer-runs", type=int, default=1, help="runs of kubectl, Helm and kapp")
    p.add_argument("--tools", default="ssa,kix,kubectl,helm,kapp")
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--kix", required=True)
    p.add_argument("--kubectl", required=True)
    p.add_argument("--kubectl-version", default="v1.36.3")
    p.add_argument("--helm")
    p.add_argument("--kapp")
    p.add_argument("--ssa-loop", required=True)
    p.add_argument("--scale-from", type=int, default=10000,
                   help="from this size on: ConfigMaps only, the scale sequence (kix, raw SSA loop)")
    p.add_argument("--audit", help="the control plane's audit log (byte offsets per step are recorded)")
    Bench(p.parse_args()).main()


if __name__ == "__main__":
    main()
