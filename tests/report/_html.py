"""What counts as an external reference in an HTML page: anything a browser would fetch or
navigate to outside the page itself. Used by the report tests (and tested on a hostile page)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

#: Attributes through which a page fetches or links something.
_URL_ATTRS = {"src", "href", "xlink:href", "action", "formaction", "srcset", "poster", "data",
              "background", "cite", "longdesc", "manifest", "ping", "codebase", "archive"}
#: Elements that run or embed something even without a URL attribute we know of.
_ACTIVE_TAGS = {"script", "iframe", "frame", "object", "embed", "link", "base", "applet", "meta"}
_CSS_URL = re.compile(r"url\s*\(|@import", re.IGNORECASE)


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[str] = []
        self.scripts = 0
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self.scripts += 1
        if tag == "style":
            self._in_style = True
        if tag in _ACTIVE_TAGS and not (tag == "meta" and _harmless_meta(attrs)):
            self.refs.append(f"<{tag}>")
        for name, value in attrs:
            v = (value or "").strip()
            if name.lower() in _URL_ATTRS and not v.startswith("#"):
                self.refs.append(f"{tag} {name}={v}")
            if name.lower() == "style" and _CSS_URL.search(v):
                self.refs.append(f"{tag} style={v}")
            if name.lower().startswith("on"):
                self.refs.append(f"{tag} {name} (an event handler)")
            if _CSS_URL.search(v) and "url(#" not in v.replace(" ", ""):
                self.refs.append(f"{tag} {name}={v}")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style and _CSS_URL.search(data):
            self.refs.append(f"css {data[:60]}")


def _harmless_meta(attrs: list[tuple[str, str | None]]) -> bool:
    names = {k.lower() for k, _ in attrs}
    return names <= {"charset", "name", "content"} and "http-equiv" not in names


def external_references(html: str) -> tuple[list[str], int]:
    """``(references, scripts)``: everything that would fetch, embed, run or leave the page."""
    p = _Refs()
    p.feed(html)
    p.close()
    return p.refs, p.scripts
