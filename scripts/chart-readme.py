#!/usr/bin/env python3
"""Writes the values table of charts/drift-sentinel/README.md from the `# --` comments of the
chart's values.yaml (plain Python 3 and PyYAML, nothing downloaded).

A comment block that starts with `# -- ` documents the key right below it; the lines after it that
start with `#` continue the text. The default shown is the key's value in values.yaml. The table
goes between the README's `<!-- values-table:start -->` and `<!-- values-table:end -->` lines.

    python3 scripts/chart-readme.py           # rewrite the table
    python3 scripts/chart-readme.py --check   # exit 1 when the README's table is stale
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "drift-sentinel"
START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-]+):(?P<rest>.*)$")


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every key of `text` with a `# --` comment, in file order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    doc: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# -- ") or stripped == "# --":
            doc = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if doc is not None:
                doc.append(stripped[1:].strip())
            continue
        match = KEY.match(line)
        if not match or stripped.startswith("- "):
            if stripped:
                doc = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = ".".join([k for _, k in stack] + [match["key"]])
        if doc is not None:
            out.append((path, " ".join(d for d in doc if d)))
            doc = None
        rest = match["rest"].split(" #")[0].strip()
        if not rest:
            stack.append((indent, match["key"]))
    return out


def default_of(values: dict, dotted: str):
    value = values
    for key in dotted.split("."):
        value = value[key]
    return value


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_table(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for dotted, description in documented_keys(values_text):
        default = default_of(values, dotted)
        kind = {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object",
                type(None): "int or empty"}[type(default)]
        shown = json.dumps(default, separators=(", ", ": "))
        rows.append(f"| `{dotted}` | {kind} | `{cell(shown)}` | {cell(description)} |")
    return "\n".join(rows)


def updated(readme: str, table: str) -> str:
    if START not in readme or END not in readme:
        raise SystemExit(f"chart-readme: the README lacks the markers {START} and {END}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main(argv: list[str]) -> int:
    readme_path = CHART / "README.md"
    readme = readme_path.read_text()
    want = updated(readme, render_table((CHART / "values.yaml").read_text()))
    if "--check" in argv:
        if want != readme:
            print(f"{readme_path} is stale: run python3 scripts/chart-readme.py", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
