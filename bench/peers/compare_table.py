#!/usr/bin/env python3
"""Prints the side-by-side table for bench/compare.sh: vram's bench rows next to the CUDA C
references (bench/c) and the Python peers (cupy_pool.py), with the ratio and the target each row is
held to. Reads the files compare.sh wrote into one directory.

usage: compare_table.py <dir>    (expects vram.jsonl or vram.*.json, pinned_copy.jsonl, alloc_async.jsonl, peers.jsonl;
                                   a program run several times counts with its best run)
"""
import glob
import json
import os
import sys


def read_jsonl(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def size_text(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}"
        n /= 1024


def num(v):
    if v is None:
        return "-"
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}"


def main(directory):
    # vram's rounds (vram.1.json, vram.2.json, ...): best per row, as for the references.
    runs = read_jsonl(os.path.join(directory, "vram.jsonl"))
    for name in sorted(glob.glob(os.path.join(directory, "vram*.json"))):
        with open(name) as f:
            try:
                runs.append(json.load(f))
            except json.JSONDecodeError:
                pass
    vram = runs[0] if runs else {"rows": [], "backend": "missing"}
    ours = {}
    for run in runs:
        for r in run["rows"]:
            key = (r["name"], r["size"])
            better = max if r["unit"] == "GB/s" else min
            ours[key] = better(ours[key], r["value"]) if key in ours else r["value"]
    # compare.sh runs every program in several rounds (so no side is measured only on a cold CPU);
    # each counts with its best round.
    pinned = {}
    for r in read_jsonl(os.path.join(directory, "pinned_copy.jsonl")):
        best = pinned.setdefault(r["size"], {"h2d_gbps": 0.0, "d2h_gbps": 0.0})
        for key in ("h2d_gbps", "d2h_gbps"):
            best[key] = max(best[key], r[key])
    alloc = {}
    for r in read_jsonl(os.path.join(directory, "alloc_async.jsonl")):
        key = (r["name"], r["size"])
        alloc[key] = min(alloc.get(key, float("inf")), r["ns_per_pair"])
    peers = {}
    for r in read_jsonl(os.path.join(directory, "peers.jsonl")):
        if "ns_per_pair" in r:
            key = (r["name"], r["size"])
            peers[key] = min(peers.get(key, float("inf")), r["ns_per_pair"])

    # (what, size, ours, reference name, reference value, kind, target)
    # kind 'higher': ratio = ours/ref, must be >= target; 'lower': ratio = ours/ref, must be <= target;
    # 'absolute': ours must be <= target (ns); None: for information.
    lines = []
    pinned_sizes = sorted(set(pinned) | {size for (name, size) in ours if name.startswith("pinned ")})
    for size in pinned_sizes:
        for direction, key in (("H2D", "h2d_gbps"), ("D2H", "d2h_gbps")):
            target = 0.97 if size >= (256 << 20) else None
            lines.append((f"pinned {direction} GB/s", size, ours.get((f"pinned {direction}", size)),
                          "CUDA C pinned_copy", pinned.get(size, {}).get(key), "higher", target))
    driver_rows = set(alloc) | {key for key in ours if key[0].startswith("cuMemAlloc")}
    for name, size in sorted(driver_rows):
        target = 1.3 if name.startswith("cuMemAllocAsync") else None
        lines.append((f"{name} ns", size, ours.get((name, size)), "CUDA C alloc_async", alloc.get((name, size)),
                      "lower", target))
    for size in (256, 1 << 20, 64 << 20):
        pool = ours.get(("PoolResource", size))
        lines.append(("PoolResource pair ns", size, pool, "cupy MemoryPool", peers.get(("cupy MemoryPool", size)),
                      "absolute", 250.0))
        lines.append(("AsyncResource pair ns", size, ours.get(("AsyncResource", size)), "cupy MemoryAsyncPool",
                      peers.get(("cupy MemoryAsyncPool", size)), "lower", None))
        lines.append(("PoolResource pair ns", size, pool, "torch.empty", peers.get(("torch.empty", size)), "lower", None))
        lines.append(("AsyncResource pair ns", size, ours.get(("AsyncResource", size)), "cuda.core Buffer",
                      peers.get(("cuda.core Buffer", size)), "lower", None))

    header = ("what", "size", "vram", "reference", "ref", "ratio", "target", "")
    table = [header]
    failures = 0
    for what, size, our, ref_name, ref, kind, target in lines:
        ratio = our / ref if our is not None and ref else None
        verdict, target_text = "", ""
        if kind == "higher" and target is not None:
            target_text = f">= {target:g}x"
            verdict = "ok" if ratio is not None and ratio >= target else "MISS"
        elif kind == "lower" and target is not None:
            target_text = f"<= {target:g}x"
            verdict = "ok" if ratio is not None and ratio <= target else "MISS"
        elif kind == "absolute" and target is not None:
            target_text = f"<= {target:g} ns"
            verdict = "ok" if our is not None and our <= target else "MISS"
        if verdict == "MISS":
            failures += 1
        table.append((what, size_text(size), num(our), ref_name, num(ref),
                      "-" if ratio is None else f"{ratio:.3f}x", target_text, verdict))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    right = {1, 2, 4, 5}
    out = [f"vram backend: {vram.get('backend')}  device: {vram.get('device', '?')}  rounds: {len(runs)}"]
    for i, row in enumerate(table):
        out.append("  ".join(str(c).rjust(widths[j]) if j in right else str(c).ljust(widths[j])
                             for j, c in enumerate(row)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    skipped = vram.get("skipped", [])
    if skipped:
        out.append("")
        out.append("vram rows skipped:")
        out.extend(f"  {s['group']}: {s['name']} {size_text(s['size'])}: {s['reason']}" for s in skipped)
    out.append("")
    out.append(f"{failures} target(s) missed" if failures else "all targets met")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
