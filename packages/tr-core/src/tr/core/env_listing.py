"""``python -m tr.core.env``: the registry of tr.core.env as a table, one variable in full, or docs/ENVIRONMENT.md.

    python -m tr.core.env                      every variable: type, default, value set now, what it changes
    python -m tr.core.env TR_FC_DRELU ...      those variables in full (why they change what they change)
    python -m tr.core.env --markdown           docs/ENVIRONMENT.md's tables
    python -m tr.core.env --update-doc FILE    rewrite the tables between FILE's markers, nothing else

The exit status is 1 when a variable set now has a value of the wrong type (each is named), 2 for a bad call.
docs/ENVIRONMENT.md keeps its prose; each table sits between ``<!-- begin tr.core.env SECTION -->`` and
``<!-- end tr.core.env SECTION -->``, and packages/tr-core/tests/test_env_listing.py checks it is current.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from tr.core import env
from tr.core.errors import ConfigError

SECTIONS = ("running", "building", "setup")
_CHANGES = {"plan": "the plan", "numerics": "the numbers", "engines": "the engines", "none": "nothing"}
_READ = {"python": "", "native": " (native)", "build": " (CMake)", "setup": ""}
_BLOCK = re.compile(r"(<!-- begin tr\.core\.env (\w+) -->\n)(.*?)(<!-- end tr\.core\.env \2 -->)", re.S)


def _current(var: env.Var, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(the value set now as shown, the error when it is not of the variable's type)."""
    raw = environ.get(var.name)
    if raw is None:
        return "", None
    try:
        var.parse(raw)
    except ConfigError as e:
        return f"{raw!r} (invalid)", str(e)
    return raw, None


def table(environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """(the text table of every variable, the errors of the values set now)."""
    rows, errors = [("variable", "type", "default", "set now", "changes", "what it does")], []
    for var in env.VARIABLES.values():
        now, error = _current(var, environ)
        if error is not None:
            errors.append(error)
        changes = _CHANGES[var.effect] if var.section == "running" else f"({var.read} time)"
        rows.append((var.name, var.type, var.show(var.default), now, changes, var.doc.replace("`", "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[5] for r in rows]
    return "\n".join(line.rstrip() for line in lines), errors


def details(var: env.Var, environ: Mapping[str, str]) -> tuple[str, str | None]:
    """(everything about one variable, the error of its value set now), as table() gives them for all."""
    now, error = _current(var, environ)
    when = {"python": "at run time (Python)", "native": "at run time (native code)", "build": "when it builds",
            "setup": "while setting up"}[var.read]
    lines = [var.name, f"  accepts:  {var.accepts()}", f"  default:  {var.show(var.default)}",
             f"  set now:  {now or '(unset)'}", f"  read by:  {var.package}, {when}"]
    if var.section == "running":
        lines.append(f"  changes:  {_CHANGES[var.effect]}: {var.why}")
    lines.append(f"  {_text(var)}".replace("`", ""))
    if error is not None:
        lines.append(f"  error:    {error}")
    return "\n".join(lines), error


def _text(var: env.Var) -> str:
    """The doc and its further sentences, for docs/ENVIRONMENT.md."""
    if not var.more:
        return var.doc
    return var.doc + (" " if var.more.startswith("(") else ". ") + var.more


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _accepts_md(var: env.Var) -> str:
    return ", ".join(f"`{c}`" for c in var.choices) if var.type == "choice" else var.accepts()


def markdown(section: str) -> str:
    """The Markdown table of ``section`` (running, building, setup), ending with a newline."""
    if section not in SECTIONS:
        raise ConfigError(f"unknown section {section!r}: expected one of {list(SECTIONS)}")
    running = section == "running"
    head = ["variable", "accepts", "default", "read by", *(["changes"] if running else []), "what it does"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for var in env.VARIABLES.values():
        if var.section != section:
            continue
        default = "unset" if var.default is None else f"`{var.show(var.default)}`"
        row = [f"`{var.name}`", _accepts_md(var), default, var.package + _READ[var.read],
               *([_CHANGES[var.effect]] if running else []), _text(var)]
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def render_doc(text: str) -> str:
    """``text`` (docs/ENVIRONMENT.md) with every marked table made anew from the registry; ConfigError when a
    section's markers are missing, repeated or unknown."""
    found = [m.group(2) for m in _BLOCK.finditer(text)]
    for s in found:
        if s not in SECTIONS:
            raise ConfigError(f"a table marked {s!r}: expected one of {list(SECTIONS)}")
    for s in SECTIONS:
        if found.count(s) != 1:
            raise ConfigError(f"the {s!r} table must be marked once (<!-- begin tr.core.env {s} --> ... <!-- end "
                              f"tr.core.env {s} -->), found {found.count(s)}")
    return _BLOCK.sub(lambda m: m.group(1) + markdown(m.group(2)) + m.group(4), text)


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    p = argparse.ArgumentParser(prog="python -m tr.core.env", description="tr's environment variables.")
    p.add_argument("names", nargs="*", help="show these variables in full")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--markdown", action="store_true", help="print docs/ENVIRONMENT.md's tables")
    out.add_argument("--update-doc", metavar="FILE", help="rewrite the marked tables of FILE from the registry")
    a = p.parse_args(argv)
    if (a.markdown or a.update_doc) and a.names:
        p.error("names go without --markdown and --update-doc")
    try:
        if a.markdown:
            print("\n".join(f"<!-- {s} -->\n{markdown(s)}" for s in SECTIONS), end="")
            return 0
        if a.update_doc:
            path = Path(a.update_doc)
            text = path.read_text(encoding="utf-8")
            new = render_doc(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
            print(f"{path}: {'updated' if new != text else 'already current'}")
            return 0
        if a.names:
            errors = []
            for name in a.names:
                text, error = details(env.variable(name), environ)
                print(text)
                errors += [error] if error else []
        else:
            text, errors = table(environ)
            print(text)
    except (ConfigError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errors else 0
