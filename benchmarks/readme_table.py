"""Rewrite the README's "Measured on the H100" table from benchmarks/results/*.json.

    python benchmarks/readme_table.py          # rewrite README.md
    python benchmarks/readme_table.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
MAX_ROWS = 6


def table() -> str:
    lines = ["| result file | kernel | speed | vs baseline | device, date |", "| --- | --- | --- | --- | --- |"]
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        if path.stem.startswith("experiment_"):
            continue  # tuning experiments: see the scripts in benchmarks/experiments/
        d = json.loads(path.read_text())
        if "set" in d:
            continue  # a result set (several problems, bench.save_set): its notebook shows it
        unit = d.get("unit", "GB/s")
        env = d.get("environment", {})
        where = f"{env.get('device', '?')}, {env.get('date', '?')[:10]}"
        rows = d["rows"]
        if len(rows) > MAX_ROWS:  # a sweep: the baseline and the fastest few
            fastest = sorted((r for r in rows if r["name"] != d["baseline"]), key=lambda r: -r["ratio"])
            rows = [r for r in rows if r["name"] == d["baseline"]] + fastest[:MAX_ROWS - 2]
        for r in rows:
            speed = r["tflops"] if unit == "TFLOP/s" else r["gbps"]
            lines.append(f"| `{path.stem}` | {r['name']} | {speed:.0f} {unit} | "
                         f"{r['ratio']:.3f} x {d['baseline']} | {where} |")
        if len(rows) < len(d["rows"]):
            lines.append(f"| `{path.stem}` | ({len(d['rows']) - len(rows)} more in the file) | | | |")
    return "\n".join(lines)


def render(text: str) -> str:
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print("README.md's results table is out of date: python benchmarks/readme_table.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
