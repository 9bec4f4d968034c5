"""Before/after table of two `make bench` JSON files: per workload and baseline, the tf_ext
speedup (baseline median / tf_ext median, measured in the same run) in each.

    python bench/compare.py docs/bench.json bench_results/bench.json
"""

import json
import sys


def ratios(path):
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    return {(r["workload"], r["variant"]): r for r in rows if not r["is_tf_ext"]}, \
        {r["workload"]: r for r in rows if r["is_tf_ext"]}


def main(before_path, after_path):
    before, before_ours = ratios(before_path)
    after, after_ours = ratios(after_path)
    print("| workload | baseline | tf_ext median ms before | after | speedup before | after |")
    print("|---|---|---:|---:|---:|---:|")
    for key, row in after.items():
        old = before.get(key)
        w = key[0]
        print(f"| {w} | {key[1]} | "
              f"{before_ours[w]['median_ms']:.2f} | {after_ours[w]['median_ms']:.2f} | "
              f"{old['speedup_vs_this']:.2f}x | {row['speedup_vs_this']:.2f}x |"
              if old and w in before_ours else
              f"| {w} | {key[1]} | | {after_ours[w]['median_ms']:.2f} | | "
              f"{row['speedup_vs_this']:.2f}x |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
