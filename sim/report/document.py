"""A report as a list of blocks (headings, paragraphs, tables, figures), rendered two ways and
written so that no reader sees half of it.

- HTML: one self-contained file. Every figure is a PNG inlined as a ``data:`` URI and the style
  sheet is in the page, so it opens offline, attached to a mail or from a CI artefact, and
  fetches nothing. Text is escaped, never linked: sources quoted in a table stay text.
- Markdown: the same blocks, each figure a PNG file in ``STEM_files/`` beside it, referenced by
  a relative path, so the folder can be moved or committed whole.

Writing (``write_report``): the figures' folder is written into a temporary folder and swapped
in, then each text file through a temporary file renamed into place (``os.replace``), the HTML
last. A report killed midway leaves the previous report whole, or temporaries whose names start
with a dot.
"""

from __future__ import annotations

import base64
import html
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import sim

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 62rem;
       margin: 2rem auto; padding: 0 1rem; color: #1d2330; line-height: 1.5; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; }
h3 { font-size: 1.05rem; margin-top: 1.5rem; }
p.answer { font-size: 1.05rem; background: #f3f6fb; border-left: 4px solid #3465a4;
           padding: 0.75rem 1rem; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #4a5263; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
th, td { border: 1px solid #d0d5de; padding: 0.3rem 0.6rem; text-align: left;
         vertical-align: top; }
th { background: #eef1f6; }
caption { text-align: left; font-size: 0.9rem; color: #4a5263; padding-bottom: 0.3rem; }
footer { margin-top: 2rem; font-size: 0.8rem; color: #6b7385; }
"""


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2  # 2: a section; 3: a part of one (a sweep's traffic)


@dataclass(frozen=True)
class Paragraph:
    text: str
    answer: bool = False  # the answer paragraph, set apart


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    name: str  # the PNG's file name without .png: lower case, digits, _ and -
    caption: str
    png: bytes


Block = Heading | Paragraph | Table | Figure


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block | None) -> None:
        """Append the blocks given (None: a section the input does not support)."""
        self.blocks += [b for b in blocks if b is not None]

    @property
    def figures(self) -> list[Figure]:
        return [b for b in self.blocks if isinstance(b, Figure)]


def _footer() -> str:
    return f"Written by fleetcast report (Fleetcast {sim.__version__})."


def render_html(doc: Document) -> str:
    esc = html.escape
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(doc.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{esc(doc.title)}</h1>",
    ]
    for block in doc.blocks:
        if isinstance(block, Heading):
            parts.append(f"<h{block.level}>{esc(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            parts.append(
                f'<p class="answer">{esc(block.text)}</p>'
                if block.answer
                else f"<p>{esc(block.text)}</p>"
            )
        elif isinstance(block, Table):
            head = "".join(f"<th>{esc(c)}</th>" for c in block.columns)
            body = "".join(
                "<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>"
                for row in block.rows
            )
            caption = f"<caption>{esc(block.caption)}</caption>" if block.caption else ""
            parts.append(
                f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
            )
        else:
            data = base64.b64encode(block.png).decode("ascii")
            parts.append(
                f'<figure><img src="data:image/png;base64,{data}" alt="{esc(block.name)}">'
                f"<figcaption>{esc(block.caption)}</figcaption></figure>"
            )
    parts += [f"<footer>{esc(_footer())}</footer>", "</body></html>"]
    return "\n".join(parts) + "\n"


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, one line."""
    return " ".join(text.replace("|", "\\|").split())


def render_markdown(doc: Document, files_folder: str) -> str:
    """Markdown with each figure as ``files_folder/NAME.png`` (relative to the file)."""
    parts = [f"# {doc.title}"]
    for block in doc.blocks:
        if isinstance(block, Heading):
            parts.append(f"{'#' * block.level} {block.text}")
        elif isinstance(block, Paragraph):
            parts.append(f"> {block.text}" if block.answer else block.text)
        elif isinstance(block, Table):
            lines = [
                "| " + " | ".join(_cell(c) for c in block.columns) + " |",
                "|" + "---|" * len(block.columns),
                *("| " + " | ".join(_cell(c) for c in row) + " |" for row in block.rows),
            ]
            parts.append((f"{block.caption}\n\n" if block.caption else "") + "\n".join(lines))
        else:
            parts.append(f"![{block.name}]({files_folder}/{block.name}.png)\n\n*{block.caption}*")
    parts.append(f"---\n{_footer()}")
    return "\n\n".join(parts) + "\n"


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_figures(doc: Document, folder: Path) -> None:
    """The figures as ``folder/NAME.png``, the folder replaced whole."""
    new = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".partial"))
    try:
        for figure in doc.figures:
            (new / f"{figure.name}.png").write_bytes(figure.png)
        os.chmod(new, 0o755)
        if folder.exists():
            old = Path(
                tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.", suffix=".old")
            )
            os.replace(folder, old / folder.name)
            os.replace(new, folder)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(new, folder)
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise


def write_report(doc: Document, stem: Path) -> tuple[Path, Path]:
    """``STEM.html`` (self-contained) and ``STEM.md`` with ``STEM_files/``; their paths."""
    names = [f.name for f in doc.figures]
    assert len(set(names)) == len(names), f"two figures share a name: {names}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    files = stem.with_name(f"{stem.name}_files")
    _write_figures(doc, files)
    markdown, page = stem.with_name(f"{stem.name}.md"), stem.with_name(f"{stem.name}.html")
    _write_text(markdown, render_markdown(doc, files.name))
    _write_text(page, render_html(doc))
    return page, markdown
