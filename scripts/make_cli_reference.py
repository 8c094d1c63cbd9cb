"""Write the CLI reference page from podsim's own argparse parser: ``python scripts/make_cli_reference.py``.

``--check`` writes nothing and exits 1 (naming the page) when the page differs from what the parser gives, so a
flag added or changed without regenerating the page fails CI (``tests/test_cli_reference.py``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "cli.md"
WIDTH = 100  #: usage lines wrap here whatever the terminal (the page must not depend on it)

HEADER = """# Command-line reference

Generated from podsim's argument parser by `python scripts/make_cli_reference.py`; do not edit by hand
(`tests/test_cli_reference.py` fails when this page and the parser differ). Every command that simulates
prints a **bound** (ideal peaks) unless its `--calibrated` flag adds the **forecast** beside it. Bad input
prints one line on stderr and exits with status 2 ([bad inputs](../bad_inputs.md)).
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if action.help == argparse.SUPPRESS:
        return ""
    if not action.help:
        return "print one JSON object instead of text" if "--json" in action.option_strings else ""
    formatter = parser._get_formatter()
    return _cell(formatter._expand_help(action))


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    names = ", ".join(f"`{s}`" for s in action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or (("{" + ",".join(map(str, action.choices)) + "}") if action.choices
                                 else action.dest.upper())
    return f"{names} `{metavar}`"


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS, [], False) or action.required:
        return ""
    return f"`{action.default}`"


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _section(name: str, parser: argparse.ArgumentParser, summary: str) -> list[str]:
    lines = [f"## podsim {name}", "", _cell(summary) + ("." if summary and not summary.endswith(".") else ""), "",
             "```text", _usage(parser), "```", ""]
    rows = [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    if rows:
        lines += ["| argument | default | what it does |", "| --- | --- | --- |"]
        for action in rows:
            required = " (required)" if action.required and action.option_strings else ""
            choices = ""
            if action.choices and action.metavar:
                choices = " One of " + ", ".join(f"`{c}`" for c in action.choices) + "."
            lines.append(f"| {_flags(action)}{required} | {_default(action)} | {_help(parser, action)}{choices} |")
        lines.append("")
    return lines


def render() -> str:
    """The page's text, from `simulator.frontend.cli.build_parser`."""
    from simulator.frontend.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    lines = [HEADER, "| command | what it does |", "| --- | --- |"]
    lines += [f"| [`podsim {name}`](#podsim-{name}) | {_cell(summaries.get(name, ''))} |" for name in sub.choices]
    lines.append("")
    for name, child in sub.choices.items():
        lines += _section(name, child, summaries.get(name, ""))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page is out of date; write nothing")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python scripts/make_cli_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
