"""The Markdown of the decks: the small subset ``build.py`` turns into each slide's HTML.

Headings (``#`` to ``###``), paragraphs, lists (nested by two spaces; a line
that is not an item continues the item before it), fenced code, pipe tables,
``**bold**``, ``*italic*``, `` `code` `` (left as written), links, and image
lines ``![caption](target)``, which the caller renders (a figure drawn by
minidist, or a file).
"""

from __future__ import annotations

import html
import re

INLINE = [(re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
          (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"<em>\1</em>"),
          (re.compile(r"\[([^\]]+)\]\(([^)]+)\)"), r'<a href="\2">\1</a>')]
IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)]+)\)$")
LIST_ITEM = re.compile(r"^(\s*)([-*]|\d+\.) (.*)$")


def inline(text: str) -> str:
    """Inline markup of one line of text; code spans are left as they are written."""
    parts = re.split(r"(`[^`]+`)", html.escape(text, quote=False))
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(f"<code>{part[1:-1]}</code>")
            continue
        for pattern, repl in INLINE:
            part = pattern.sub(repl, part)
        out.append(part)
    return "".join(out)


def render(lines: list[str], image) -> str:
    """HTML of a slide's Markdown lines; ``image(caption, target)`` renders an image line."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")),
                       len(lines))
            code = html.escape("\n".join(lines[i + 1:end]), quote=False)
            out.append(f"<pre><code>{code}</code></pre>")
            i = end + 1
        elif heading := re.match(r"^(#{1,3}) (.*)$", line):
            level = len(heading.group(1))
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            i += 1
        elif match := IMAGE.match(line.strip()):
            out.append(image(match.group(1), match.group(2)))
            i += 1
        elif line.lstrip().startswith("|"):
            end = i
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out.append(_table(lines[i:end]))
            i = end
        elif LIST_ITEM.match(line):
            end = i
            while end < len(lines) and (LIST_ITEM.match(lines[end])
                                        or lines[end].startswith("  ") and lines[end].strip()):
                end += 1
            out.append(_list(lines[i:end]))
            i = end
        else:
            end = i
            while end < len(lines) and lines[end].strip() and not _starts_block(lines[end]):
                end += 1
            out.append(f"<p>{inline(' '.join(s.strip() for s in lines[i:end]))}</p>")
            i = end
    return "\n".join(out)


def _starts_block(line: str) -> bool:
    return bool(line.startswith(("```", "#", "|")) or LIST_ITEM.match(line)
                or IMAGE.match(line.strip()))


def _table(rows: list[str]) -> str:
    cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
    body = [r for r in cells[1:] if not all(re.fullmatch(r":?-+:?", c) for c in r)]
    head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
    rows_html = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>"
                        for r in body)
    return f"<table><tr>{head}</tr>{rows_html}</table>"


def _list(lines: list[str]) -> str:
    """Nested lists by indentation (a deeper item opens a list inside the item before it);
    a line that is not an item continues the item before it."""
    out, stack = [], []  # the open lists: (indent, tag)
    for line in lines:
        match = LIST_ITEM.match(line)
        if not match:
            out[-1] += " " + inline(line.strip())
            continue
        indent, tag = len(match.group(1)), "ol" if match.group(2)[0].isdigit() else "ul"
        if stack and indent > stack[-1][0]:
            stack.append((indent, tag))
            out.append(f"<{tag}>")
        else:
            while len(stack) > 1 and indent < stack[-1][0]:
                out.append(f"</li></{stack.pop()[1]}>")
            if stack:
                out.append("</li>")
            else:
                stack.append((indent, tag))
                out.append(f"<{tag}>")
        out.append(f"<li>{inline(match.group(3))}")
    out.extend(f"</li></{tag}>" for _, tag in reversed(stack))
    return "".join(out)
