"""Text a terminal shows as text, whatever a value holds (issue 19, items 9 and 10).

Lines quote what other people control (issue titles, file and process names, ini values):
:func:`visible` escapes every code point a terminal would act on, so no quoted name clears a screen
or forges ``verdict: ready``; :func:`fit` makes a line encodable on a terminal that is not UTF-8.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Any

_UNSAFE_CLASS = "\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
_UNSAFE = re.compile(f"[\x00-\x0a{_UNSAFE_CLASS}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09{_UNSAFE_CLASS}]")

#: plain spellings, for a terminal that cannot encode the character
PLAIN = dict(zip("…—–‘’“”→←≥≤≠≈×±µ°\u00a0•·",
                 ("...", "-", "-", "'", "'", '"', '"', "->", "<-", ">=", "<=", "!=", "~", "x", "+/-", "u",
                  " deg", " ", "*", "."), strict=True))
#: the codec error handler :func:`fit` registers (usable as ``errors=`` on a stream too)
ERRORS = "pytest_dgx_spark.plain"


def _escape(match: re.Match[str]) -> str:
    return repr(match.group(0))[1:-1]  # '\x1b' -> \x1b, '\u2028' -> \u2028, '\udcff' -> \udcff


def visible(text: str) -> str:
    """``text`` with every code point a terminal would act on written as its escape."""
    return _UNSAFE.sub(_escape, str(text))


def visible_lines(text: str) -> str:
    """:func:`visible` for a block of our own lines: its newlines stay."""
    return _UNSAFE_BUT_NEWLINE.sub(_escape, str(text))


def _plain(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    chunk = exc.object[exc.start : exc.end]
    plain = (PLAIN.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii") for ch in chunk)
    return "".join(plain), exc.end


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
    """The plugin's one writer of terminal lines: ``text`` escaped and fitted to the terminal's encoding
    (pytest's own fallback escapes the whole line); ``lead``, our own markup, is written as it is."""
    tw = terminalreporter.config.get_terminal_writer()
    encoding = getattr(getattr(tw, "_file", None), "encoding", None)
    text = fit(visible(text), encoding if isinstance(encoding, str) else None)
    terminalreporter.write_line(lead + text, **markup)


def shortened(items: Sequence[str], n: int = 3) -> list[str]:
    """``[a, b, c, "and 4 more"]``: the first ``n`` non-empty items and how many were left out."""
    texts = [str(i) for i in items if str(i)]
    return [*texts[:n], f"and {len(texts) - n} more"] if len(texts) > n else texts


def plus_more(first: str, total: int) -> str:
    """``first (+3 more)``: the first of ``total`` findings and a count of the rest."""
    return first if total <= 1 else f"{first} (+{total - 1} more)"
