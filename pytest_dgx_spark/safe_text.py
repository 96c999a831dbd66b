"""Text a terminal shows as text, whatever a value holds (issue 19, items 9 and 10).

Check lines quote what other people control: GitHub issue titles, the names
of config files in a checkout, process names (any local user can name a
process ``"\\x1b[2Jvllm"``), ini values. Written raw, a control sequence in
one of them clears the screen, hides text, or starts a new line that forges
``verdict: ready`` in a CI log; a bidi override reorders what a reader sees.

:func:`visible` is the boundary every such text crosses: each code point a
terminal would act on instead of print becomes its Python escape
(``\\x1b``, ``\\u202e``) — C0 and C1 controls, DEL, the line and paragraph
separators, bidi controls, and lone surrogates (which no UTF-8 terminal can
encode). Backslashes are left alone, so escaping twice changes nothing
(results cross it again on every JSON round trip). Where it is called:
``model.one_line`` (every text of a :class:`~pytest_dgx_spark.model.Result`),
``Reading.render``, the CLI's one writer and the plugin's terminal lines.

:func:`fit` makes a line encodable where the terminal is not UTF-8
(``LANG=C``, ``PYTHONIOENCODING=ascii``, latin-1): the few typographic
characters our lines use get plain spellings ("…" → "..."), anything else
its escape, so the line still prints instead of raising UnicodeEncodeError.
"""

from __future__ import annotations

import codecs
import re
from typing import Any

#: what a terminal acts on instead of printing: C0 controls, DEL and C1 controls,
#: ALM/LRM/RLM, the line and paragraph separators, the bidi embeddings, overrides
#: and isolates, and lone surrogates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")

#: plain spellings, for a terminal that cannot encode the character
PLAIN = {
    "\u2026": "...",
    "\u2014": "-",
    "\u2013": "-",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": '"',
    "\u201d": '"',
    "\u2192": "->",
    "\u2190": "<-",
    "\u2265": ">=",
    "\u2264": "<=",
    "\u2260": "!=",
    "\u2248": "~",
    "\u00d7": "x",
    "\u00b1": "+/-",
    "\u00b5": "u",
    "\u00b0": " deg",
    "\u00a0": " ",
    "\u2022": "*",
    "\u00b7": ".",
}
#: the codec error handler :func:`fit` registers (usable as ``errors=`` on a stream too)
ERRORS = "pytest_dgx_spark.plain"


def _escape(match: re.Match[str]) -> str:
    return repr(match.group(0))[1:-1]  # '\x1b' -> \x1b, '\u2028' -> \u2028, '\udcff' -> \udcff


def visible(text: str) -> str:
    """``text`` with every code point a terminal would act on written as its escape."""
    text = str(text)
    return _UNSAFE.sub(_escape, text) if _UNSAFE.search(text) else text


def visible_lines(text: str) -> str:
    """:func:`visible` for a block of our own lines: its newlines stay (a
    value's own newlines were collapsed before it joined the block)."""
    text = str(text)
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text) if _UNSAFE_BUT_NEWLINE.search(text) else text


def _plain(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start : exc.end]
    return "".join(PLAIN.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii") for ch in chunk), exc.end


codecs.register_error(ERRORS, _plain)


def fit(text: str, encoding: str | None) -> str:
    """``text`` as the terminal's ``encoding`` can write it (unchanged when it can)."""
    if not encoding:
        return text
    try:
        text.encode(encoding)
        return text
    except UnicodeEncodeError:
        return text.encode(encoding, ERRORS).decode(encoding, "replace")
    except LookupError:  # an encoding Python does not know: ASCII is written by all
        return text.encode("ascii", ERRORS).decode("ascii")


def write_line(terminalreporter: Any, text: str, lead: str = "", **markup: bool) -> None:
    """The plugin's one writer of terminal lines (pytest's ``write_line``):
    ``text`` escaped (:func:`visible`: one line, whatever a quoted name
    holds) and fitted to the terminal's encoding. pytest's own fallback for
    an unencodable line escapes the whole of it ("\\u2026"); this keeps the
    line readable. ``lead`` is our own markup (a coloured word), written
    before it as it is."""
    tw = getattr(terminalreporter, "_tw", None)
    encoding = getattr(getattr(tw, "_file", None), "encoding", None)
    text = fit(visible(text), encoding if isinstance(encoding, str) else None)
    terminalreporter.write_line(lead + text, **markup)
