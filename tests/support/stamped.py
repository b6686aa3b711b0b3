"""Records of a term-mode leader's output as a `TermFilter` sees them: their headers."""

from __future__ import annotations

from krabka.format.terms import TERM_HEADER, TermStamp, encode_term_header

Headers = list[tuple[str, bytes | None]]


def data(role: str, term: int) -> Headers:
    """The headers of a data record `role`'s leader of `term` wrote."""
    return [("trace", b"x"), (TERM_HEADER, encode_term_header(TermStamp(role, term)))]


def barrier(role: str, term: int) -> Headers:
    """The headers of the barrier `role`'s leader of `term` writes before its data."""
    return [(TERM_HEADER, encode_term_header(TermStamp(role, term, barrier=True)))]


UNSTAMPED: Headers = [("trace", b"x")]
