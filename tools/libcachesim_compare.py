#!/usr/bin/env python3
"""Compare folio's eviction policies with libCacheSim's on the same traces.

libCacheSim (PyPI package `libcachesim`, the Python binding of the C simulator used by
the S3-FIFO paper) is the independent reference: this script makes the traces with
`folio-trace gen`, feeds the very same request sequence to libCacheSim's S3FIFO and LRU
and to `folio-trace replay` (folio's S3-FIFO and two-list LRU, real cache, null
backend), and prints a markdown table of miss ratios. See docs/eviction.md.

Same sequence: the script reads the trace CSV (`file_id,page_index` per line) and hands
each access to libCacheSim as one request through its Python Request API, with object
id = file_id * 2^32 + page_index, object size 1, and the cache size in objects (= pages),
so a libCacheSim object is a folio page. Cold misses count in both.

Run from the repository root (needs a venv with libcachesim; the script builds
folio-trace in release mode unless given --folio-trace):

    python3 -m venv target/pyenv && target/pyenv/bin/pip install libcachesim
    target/pyenv/bin/python tools/libcachesim_compare.py

`--check` exits non-zero unless the issue's targets hold: on Zipf(0.9) at 10,000 pages,
folio S3-FIFO within 0.02 of libCacheSim S3FIFO and below libCacheSim LRU; on scan-mix at
10,000 pages, folio S3-FIFO at least 0.05 below LRU (libCacheSim's, the independent
reference; the margin over folio's own two-list LRU, itself scan-resistant, is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# libCacheSim's S3FIFO defaults (libCacheSim/cache/eviction/S3FIFO.c, DEFAULT_CACHE_PARAMS,
# and the Python class libcachesim.S3FIFO): passed explicitly so that a change of default
# upstream cannot silently change what is compared.
S3FIFO_PARAMS = dict(small_size_ratio=0.1, ghost_size_ratio=0.9, move_to_main_threshold=2)

# The traces: name -> `folio-trace gen` arguments (before --seed and --out).
TRACES = {
    "zipf-0.9": ["zipf", "--alpha", "0.9", "--accesses", "1000000", "--pages", "100000"],
    "scan-mix": ["scan-mix"],  # its documented defaults, sized for 10,000 pages
}

HEADLINE_PAGES = 10_000
TOLERANCE = 0.02  # |folio S3-FIFO - libCacheSim S3FIFO| on zipf-0.9 at 10,000 pages
SCAN_MARGIN = 0.05  # libCacheSim LRU - folio S3-FIFO on scan-mix at 10,000 pages


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("+ " + " ".join(str(c) for c in cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def folio_trace_binary(args) -> Path:
    if args.folio_trace:
        return Path(args.folio_trace)
    run(["cargo", "build", "--release", "-q", "-p", "folio-trace"], cwd=REPO)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return target / "release" / "folio-trace"


def read_object_ids(path: Path) -> list[int]:
    """The trace as libCacheSim object ids, one per access, in order."""
    ids = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or (n == 1 and line.replace(" ", "") == "file_id,page_index"):
                continue
            file_id, page = line.split(",")
            ids.append((int(file_id) << 32) | int(page))
    return ids


def libcachesim_miss_ratio(lcs, policy: str, pages: int, ids: list[int]) -> tuple[float, float]:
    """Miss ratio of a libCacheSim cache of `pages` objects over `ids`, and its seconds."""
    if policy == "s3fifo":
        cache = lcs.S3FIFO(pages, **S3FIFO_PARAMS)
    else:
        cache = lcs.LRU(pages)
    req = lcs.Request()
    req.obj_size = 1
    get = cache.get
    hits = 0
    start = time.monotonic()
    for oid in ids:
        req.obj_id = oid
        hits += get(req)
    return 1.0 - hits / len(ids), time.monotonic() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folio-trace", help="folio-trace binary (default: cargo build --release)")
    ap.add_argument("--workdir", default=str(REPO / "target" / "libcachesim-compare"),
                    help="where traces and JSON results go")
    ap.add_argument("--sizes", default="5000,10000,20000",
                    help="cache sizes in pages (= libCacheSim objects), comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--traces", default=",".join(TRACES), help="which traces, comma-separated")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the issue's targets hold (see the module docs)")
    args = ap.parse_args()

    import libcachesim as lcs  # after argparse, so --help works without it

    sizes = [int(s) for s in args.sizes.split(",")]
    unknown = set(args.traces.split(",")) - set(TRACES)
    if unknown:
        ap.error(f"unknown trace(s) {sorted(unknown)}; known: {', '.join(TRACES)}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    binary = folio_trace_binary(args)
    started = time.monotonic()

    rows = []
    for name in args.traces.split(","):
        trace = workdir / f"{name}.csv"
        run([binary, "gen", *TRACES[name], "--seed", str(args.seed), "--out", trace])
        # folio replays in its own process while libCacheSim runs here: two cores.
        folio_json = workdir / f"{name}.folio.json"
        folio = subprocess.Popen(
            [binary, "replay", "--trace", trace, "--policy", "both",
             "--cache-pages", ",".join(map(str, sizes)), "--json", folio_json],
            stdout=subprocess.DEVNULL)
        ids = read_object_ids(trace)
        reference = {}
        for policy in ("s3fifo", "lru"):
            for pages in sizes:
                ratio, secs = libcachesim_miss_ratio(lcs, policy, pages, ids)
                reference[policy, pages] = ratio
                print(f"libCacheSim {policy} {name} {pages}: {ratio:.4f} ({secs:.1f} s)",
                      file=sys.stderr)
        if folio.wait() != 0:
            print(f"folio-trace replay failed on {trace}", file=sys.stderr)
            return 2
        report = json.loads(folio_json.read_text())
        assert report["trace"]["accesses"] == len(ids), "folio and libCacheSim saw different traces"
        ours = {(r["policy"], r["cache_pages"]): r for r in report["runs"]}
        for pages in sizes:
            rows.append(dict(
                trace=name, pages=pages, accesses=len(ids),
                lcs_s3fifo=reference["s3fifo", pages],
                folio_s3fifo=ours["s3fifo", pages]["miss_ratio"],
                lcs_lru=reference["lru", pages],
                folio_lru=ours["lru", pages]["miss_ratio"],
                folio_frames=ours["s3fifo", pages]["cache_frames"],
            ))

    print("| trace | cache (pages) | libCacheSim S3FIFO | folio S3-FIFO | \\|diff\\| "
          "| libCacheSim LRU | folio LRU |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        diff = abs(r["folio_s3fifo"] - r["lcs_s3fifo"])
        print(f"| {r['trace']} | {r['pages']:,} | {r['lcs_s3fifo']:.4f} | {r['folio_s3fifo']:.4f} "
              f"| {diff:.4f} | {r['lcs_lru']:.4f} | {r['folio_lru']:.4f} |")
    (workdir / "comparison.json").write_text(json.dumps(
        dict(s3fifo_params=S3FIFO_PARAMS, libcachesim_version=lcs.__version__, rows=rows),
        indent=2) + "\n")

    failures = []
    by_key = {(r["trace"], r["pages"]): r for r in rows}
    zipf = by_key.get(("zipf-0.9", HEADLINE_PAGES))
    if zipf:
        diff = abs(zipf["folio_s3fifo"] - zipf["lcs_s3fifo"])
        if diff > TOLERANCE:
            failures.append(f"zipf-0.9 @ {HEADLINE_PAGES}: |folio S3-FIFO - libCacheSim S3FIFO| "
                            f"= {diff:.4f} > {TOLERANCE}")
        if not zipf["folio_s3fifo"] < zipf["lcs_lru"]:
            failures.append(f"zipf-0.9 @ {HEADLINE_PAGES}: folio S3-FIFO {zipf['folio_s3fifo']:.4f}"
                            f" is not below libCacheSim LRU {zipf['lcs_lru']:.4f}")
    scan = by_key.get(("scan-mix", HEADLINE_PAGES))
    if scan:
        # Against LRU as the independent reference implements it (plain LRU). folio's
        # own two-list LRU resists scans too (a page must be hit again to reach the
        # active list); its margin is printed, not held to the target.
        plain = scan["lcs_lru"] - scan["folio_s3fifo"]
        two_list = scan["folio_lru"] - scan["folio_s3fifo"]
        print(f"\nscan-mix @ {HEADLINE_PAGES:,} pages: folio S3-FIFO is {plain:.4f} below "
              f"libCacheSim's LRU and {two_list:.4f} below folio's two-list LRU")
        if plain < SCAN_MARGIN:
            failures.append(f"scan-mix @ {HEADLINE_PAGES}: libCacheSim LRU - folio S3-FIFO = "
                            f"{plain:.4f} < {SCAN_MARGIN}")
    print()
    print(f"libcachesim {lcs.__version__}, S3FIFO {S3FIFO_PARAMS}; "
          f"{time.monotonic() - started:.0f} s")
    for f in failures:
        print(f"target not met: {f}")
    if not failures:
        print("targets met")
    return 1 if failures and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
