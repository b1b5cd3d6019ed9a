"""``docs/reference.md`` is held to the code it describes: every environment variable declared in
``frt_dist.settings`` is in its environment section with its default (and no undeclared ``FRT_*``
name is), every subcommand and long option the ``frt`` parser has is in its command section, and
every link into the page from the repository names a heading that exists. The names are read from
the code at test time, so a flag or a variable added later fails here until the page says it."""

from __future__ import annotations

import argparse
import re

from frt_dist import settings
from frt_dist.cli.main import build_parser
from helpers.paths import ROOT

DOC = ROOT / "docs" / "reference.md"


def _sections(level: str) -> dict[str, str]:
    """Heading text -> the text under it, up to the next heading of the same or a higher level."""
    text = DOC.read_text("utf-8")
    out, name, body = {}, None, []
    for line in text.splitlines():
        m = re.match(r"^(#+) (.*)$", line)
        if m and len(m.group(1)) <= len(level):
            if name is not None:
                out[name] = "\n".join(body)
            name, body = (m.group(2).strip(), []) if len(m.group(1)) == len(level) else (None, [])
            continue
        if name is not None:
            body.append(line)
    if name is not None:
        out[name] = "\n".join(body)
    return out


def _mentions(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_every_declared_variable_is_in_the_environment_section_with_its_default():
    env = _sections("##")["Environment"]
    rows = {}
    for line in env.splitlines():
        m = re.match(r"^\| `([^`]+)` \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    missing = [name for name in settings.SETTINGS if name not in rows]
    assert not missing, f"declared in frt_dist.settings, not in docs/reference.md#environment: {missing}"
    wrong = {name: (rows[name], s.default) for name, s in settings.SETTINGS.items()
             if rows[name] != (f"`{s.default}`" if s.default is not None else "—")}
    assert not wrong, f"defaults that differ (page, code): {wrong}"


def test_no_undeclared_frt_variable_is_in_the_environment_section():
    env = _sections("##")["Environment"]
    named = set(re.findall(r"FRT_[A-Z0-9_]*[A-Z0-9](?:_<REPO>)?", env))
    undeclared = sorted(n for n in named if n not in settings.SETTINGS)
    assert not undeclared, f"FRT_* names on the page that frt_dist.settings does not declare: {undeclared}"


def _commands(parser: argparse.ArgumentParser, prefix: str = "frt") -> dict[str, tuple[str, list[str]]]:
    """``frt X`` (and ``frt X A`` for an action) -> (the section it belongs in, its long options)."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                cmd = f"{prefix} {name}"
                longs = sorted({o for a in sub._actions for o in a.option_strings
                                if o.startswith("--") and o != "--help"})
                section = cmd if prefix == "frt" else prefix
                out[cmd] = (section, longs)
                out.update(_commands(sub, cmd))
    return out


def test_every_subcommand_and_long_option_of_the_parser_is_in_the_commands_section():
    parser = build_parser()
    sections = _sections("###")
    common = sections["Common options"]
    found = _commands(parser)
    assert "frt lock" in found and "frt resolve" in found  # the walk found the parser's commands
    problems = []
    for cmd, (section, longs) in found.items():
        if section not in sections:
            problems.append(f"no '### {section}' heading")
            continue
        text = sections[section]
        if cmd != section and cmd not in text:
            problems.append(f"'{cmd}' not in '### {section}'")
        problems += [f"{cmd} {opt}: not in '### {section}' or '### Common options'" for opt in longs
                     if not _mentions(text, opt) and not _mentions(common, opt)]
    top = sorted({o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"})
    problems += [f"frt {opt}: not in '### Common options'" for opt in top if not _mentions(common, opt)]
    assert not problems, "\n".join(problems)


def test_every_link_into_the_reference_names_a_heading_of_it():
    anchors = {_anchor(m) for m in re.findall(r"^#+ (.*)$", DOC.read_text("utf-8"), re.M)}
    bad = []
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("frt_dist/**/*.py"), ROOT / "pyproject.toml"]
    for path in files:
        text = path.read_text("utf-8")
        for anchor in re.findall(r"reference\.md#([\w-]+)", text):
            if anchor not in anchors:
                bad.append(f"{path.relative_to(ROOT)}: #{anchor}")
        if path == DOC:
            bad += [f"docs/reference.md: #{a}" for a in re.findall(r"\]\(#([\w-]+)\)", text) if a not in anchors]
    assert not bad, f"links to headings docs/reference.md does not have: {bad}"


def test_every_error_class_of_frt_dist_errors_is_in_the_errors_section():
    import frt_dist.errors  # noqa: PLC0415

    section = _sections("###")["Errors"]
    missing = [name for name in frt_dist.errors.__all__ if f"`{name}`" not in section]
    assert not missing, f"in frt_dist.errors, not in docs/reference.md#errors: {missing}"
