#!/usr/bin/env python3
"""Profiles a client from the control plane's audit log (every request is
audited there with its timestamps), for finding where a deploy's time goes.

    audit.py AUDIT_LOG [--from-byte N] [--to-byte N] [--agent SUBSTRING | --no-agent] [--timeline]

Prints the client's requests by verb and resource (count, summed and median
server latency), the wall span, and with --timeline one line per 0.5 s with
the requests received in it. kix sends no User-Agent: select it with
--no-agent (the controllers all send theirs).
"""

import argparse
import collections
import datetime
import json
import statistics


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("log")
    p.add_argument("--from-byte", type=int, default=0)
    p.add_argument("--to-byte", type=int)
    p.add_argument("--agent")
    p.add_argument("--no-agent", action="store_true")
    p.add_argument("--timeline", action="store_true")
    a = p.parse_args()
    events = []
    with open(a.log, "rb") as f:
        f.seek(a.from_byte)
        data = f.read(None if a.to_byte is None else a.to_byte - a.from_byte)
    for line in data.decode().splitlines():
        if line.strip():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line cut by the byte range
            ua = e.get("userAgent")
            if a.no_agent and ua:
                continue
            if a.agent and (not ua or a.agent not in ua):
                continue
            if e.get("stage") != "ResponseComplete":
                continue
            ref = e.get("objectRef", {})
            res = ref.get("resource", e["requestURI"].split("?")[0])
            dry = "dryRun=All" in e["requestURI"]
            verb = e["verb"] + (" (dry-run)" if dry else "")
            t0, t1 = ts(e["requestReceivedTimestamp"]), ts(e["stageTimestamp"])
            events.append((t0, t1, verb, res))
    if not events:
        print("no requests")
        return
    start = min(e[0] for e in events)
    end = max(e[1] for e in events)
    print(f"{len(events)} requests over {end - start:.2f}s")
    by = collections.defaultdict(list)
    for t0, t1, verb, res in events:
        by[(verb, res)].append(t1 - t0)
    print(f"{'verb':<18} {'resource':<28} {'n':>6} {'sum s':>8} {'median ms':>10} {'first s':>8} {'last s':>8}")
    for (verb, res), lat in sorted(by.items(), key=lambda kv: -len(kv[1])):
        firsts = [e[0] - start for e in events if e[2] == verb and e[3] == res]
        print(f"{verb:<18} {res:<28} {len(lat):>6} {sum(lat):>8.2f} {statistics.median(lat) * 1000:>10.1f}"
              f" {min(firsts):>8.2f} {max(firsts):>8.2f}")
    if a.timeline:
        buckets = collections.defaultdict(collections.Counter)
        inflight = collections.Counter()
        for t0, t1, verb, res in events:
            buckets[int((t0 - start) / 0.5)][f"{verb} {res}"] += 1
        for b in range(int((end - start) / 0.5) + 1):
            c = buckets.get(b)
            text = ", ".join(f"{k}×{v}" for k, v in c.most_common(4)) if c else "-"
            print(f"{b * 0.5:7.1f}s {sum(c.values()) if c else 0:5d}  {text}")


if __name__ == "__main__":
    main()
