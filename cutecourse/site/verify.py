"""Check a built site as a reader would meet it: every link and picture resolves, no widget repr.

Sphinx already fails the build on a cross-reference it cannot resolve (it runs with warnings as
errors); this reads the HTML it wrote, which is what a browser follows, and so also catches a link
into a page's missing section, a picture file that was not copied, and a widget that reached the
page as ``VBox(children=...)`` instead of its picture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: What a widget looks like when its view could not be rendered: its Python repr.
WIDGET_REPR = re.compile(r"\b(VBox|HBox|GridBox|Tab|Accordion)\(children=")


class _Page(HTMLParser):
    """Collects a page's ids, its links (``a href``) and its resources (``img``, ``script``, ``link``)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.resources: list[str] = []
        self.images = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "img" and a.get("src"):
            self.resources.append(a["src"])
            self.images += 1
        elif tag == "script" and a.get("src"):
            self.resources.append(a["src"])
        elif tag == "link" and a.get("href") and "stylesheet" in (a.get("rel") or ""):
            self.resources.append(a["href"])


@dataclass
class Report:
    pages: int = 0
    links: int = 0
    problems: list[str] = field(default_factory=list)
    images: dict[str, int] = field(default_factory=dict)  # page -> <img> count

    @property
    def ok(self) -> bool:
        return not self.problems


def _local(url: str) -> bool:
    scheme = urlsplit(url).scheme
    return not scheme and not url.startswith("//")


def verify(site: Path) -> Report:
    """Check every HTML page under ``site``; return what was checked and what is wrong."""
    site = Path(site)
    parsed: dict[Path, _Page] = {}
    report = Report()
    for html in sorted(site.rglob("*.html")):
        if "_static" in html.relative_to(site).parts:
            continue
        text = html.read_text(encoding="utf-8", errors="replace")
        page = _Page()
        page.feed(text)
        parsed[html.resolve()] = page
        rel = str(html.relative_to(site))
        report.images[rel] = page.images
        if WIDGET_REPR.search(text):
            report.problems.append(f"{rel}: a widget is shown as its Python repr "
                                   f"({WIDGET_REPR.search(text).group(0)}...), not as its picture")
    report.pages = len(parsed)

    def ids_of(path: Path) -> set[str]:
        if path not in parsed:
            page = _Page()
            page.feed(path.read_text(encoding="utf-8", errors="replace"))
            parsed[path] = page
        return parsed[path].ids

    for html, page in list(parsed.items()):
        rel = str(html.relative_to(site.resolve()))
        for url, kind in [(u, "link") for u in page.links] + [(u, "resource") for u in page.resources]:
            if not _local(url):
                continue
            report.links += 1
            parts = urlsplit(url)
            target = html if not parts.path else (html.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                report.problems.append(f"{rel}: {kind} {url} points to a missing file")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in ids_of(target):
                report.problems.append(f"{rel}: link {url} points to a missing section "
                                       f"#{parts.fragment} of {target.relative_to(site.resolve())}")
    return report
