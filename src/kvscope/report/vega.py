"""The charting library a report page inlines, and the HTML that draws a Vega-Lite spec.

Charts are Vega-Lite specs (https://vega.github.io/vega-lite/docs/), drawn in the browser by
vega, vega-lite and vega-embed. The three come as one script from the ``vl-convert-python``
wheel (``vl_convert.javascript_bundle()``: no imports, defines ``window.vegaEmbed``), so the
page needs no network. Building that script takes about 2 s, so it is kept on disk under
``$XDG_CACHE_HOME/kvscope`` (or ``~/.cache/kvscope``), keyed by the wheel's version, and in
memory; a cache folder that cannot be written only costs the 2 s again.

:func:`chart_div` places one chart (its spec as inert JSON next to an empty ``div``);
:func:`page_script` is the one script block that draws every such ``div`` on load.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

#: vega-embed's menu: export to SVG/PNG only (its "open in editor" and "view source" links
#: would point at vega.github.io, i.e. leave an offline page).
EMBED_OPTIONS = {
    "actions": {"export": True, "source": False, "compiled": False, "editor": False},
    "renderer": "svg",
}

_DRAW = """
(function () {
  var opts = %s;
  document.querySelectorAll("div.vl-chart").forEach(function (div) {
    var src = document.getElementById(div.id + "-spec");
    if (!src) { return; }
    window.vegaEmbed(div, JSON.parse(src.textContent), opts).then(function () {
      div.setAttribute("data-drawn", "1");
    }).catch(function (err) {
      div.setAttribute("data-drawn", "error");
      div.textContent = "chart could not be drawn: " + err;
    });
  });
})();
"""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvscope"


@cache
def javascript_bundle() -> str:
    """vega + vega-lite + vega-embed as one script (from the disk cache when it is there)."""
    import vl_convert

    version = getattr(vl_convert, "__version__", "unknown")
    path = _cache_dir() / f"vl-convert-{version}-bundle.js"
    try:
        text = path.read_text(encoding="utf-8")
        if "vegaEmbed" in text:
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = str(vl_convert.javascript_bundle())  # type: ignore[call-arg]  # snippet: optional
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bundle-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
    except OSError:
        pass  # a read-only home: keep it in memory only
    return text


def _inert_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>``, no ``<!--``)."""
    return (
        json.dumps(obj, separators=(",", ":"), allow_nan=False)
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
    )


class ChartIds:
    """Numbers the charts of one page."""

    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"chart-{self.n}"


_IDS = ChartIds()


def chart_div(spec: dict[str, Any], title: str, wide: bool = False) -> str:
    """An empty ``div`` the page script draws ``spec`` into; ``aria-label`` is ``title``."""
    cid = _IDS.next()
    cls = "vl-chart wide" if wide else "vl-chart"
    return (
        f'<figure class="plot"><div class="{cls}" id="{cid}" role="img" '
        f'aria-label="{html.escape(title, quote=True)}"></div>'
        f'<script type="application/json" id="{cid}-spec">{_inert_json(spec)}</script>'
        "</figure>"
    )


def page_script() -> str:
    """The library and the loop that draws every chart ``div`` of the page."""
    bundle = javascript_bundle().replace("</script", "<\\/script")
    return f"<script>{bundle}</script><script>{_DRAW % json.dumps(EMBED_OPTIONS)}</script>"
