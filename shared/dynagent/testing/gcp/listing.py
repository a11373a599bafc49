"""How instances.list and aggregatedList read their query: filter, maxResults, pages.

The filter is the AIP-160 subset the local Compute models; anything else is refused with
HTTP 400, never ignored (a silently unfiltered list would make a test lie).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from dynagent.testing.gcp.discovery import resolve, schemas
from dynagent.testing.gcp.errors import ApiError, invalid, unsupported
from dynagent.testing.gcp.instance_shapes import API_ROOT

MAX_RESULTS: Final = 500

_FILTER_TOKEN = re.compile(
    r"""\s*(?:
        (?P<paren>[()])
      | (?P<op>!=|<=|>=|!~|=|:|<|>|~)
      | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<word>[^\s()=!:<>~"']+)
    )""",
    re.VERBOSE,
)
_FIELD_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")


class _Token(NamedTuple):
    kind: str  # paren, op, quoted, word
    text: str


@dataclass(frozen=True)
class Comparison:
    """``field op value`` with op ``=``, ``!=`` or ``:*`` (the field is set)."""

    path: tuple[str, ...]
    op: str
    value: str

    def matches(self, instance: Mapping[str, Any]) -> bool:
        present, actual = _field_value(instance, self.path)
        if self.op == ":*":
            return present
        equal = present and actual == self.value
        return equal if self.op == "=" else not equal


def _field_value(instance: Mapping[str, Any], path: tuple[str, ...]) -> tuple[bool, str]:
    node: object = instance
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False, ""
        node = node[part]
    if isinstance(node, bool):
        return True, "true" if node else "false"
    return True, str(node)


def _filter_error(text: str, why: str) -> ApiError:
    return invalid("filter", text, f"Invalid list filter expression: {why}.")


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while text[position:].strip():
        match = _FILTER_TOKEN.match(text, position)
        if match is None or match.lastgroup is None:
            raise _filter_error(text, f"unexpected character at offset {position}")
        tokens.append(_Token(match.lastgroup, match[match.lastgroup]))
        position = match.end()
    return tokens


class _FilterParser:
    """``term (AND? term)*`` where a term is ``( ... )`` or ``field op value``: every term
    must hold. OR, NOT, regular expressions and the like are refused, not guessed at."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _tokens(text)
        self._at = 0

    def parse(self) -> list[Comparison]:
        terms = self._sequence(inside_parens=False)
        if self._at < len(self._tokens):
            raise _filter_error(self._text, "unbalanced ')'")
        return terms

    def _peek(self) -> _Token | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _take(self) -> _Token:
        token = self._peek()
        if token is None:
            raise _filter_error(self._text, "the expression ends too early")
        self._at += 1
        return token

    def _sequence(self, *, inside_parens: bool) -> list[Comparison]:
        terms: list[Comparison] = []
        while (token := self._peek()) is not None and token != _Token("paren", ")"):
            if token.kind == "word" and token.text in ("OR", "NOT"):  # keywords are uppercase
                raise unsupported(f"{token.text} in a list filter")
            if token.kind == "word" and token.text == "AND":
                self._take()
                if not terms or self._peek() in (None, _Token("paren", ")")):
                    raise _filter_error(self._text, "AND needs a term on each side")
                continue
            terms.extend(self._term())
        if not terms:
            raise _filter_error(self._text, "empty expression")
        if inside_parens and self._take() != _Token("paren", ")"):
            raise _filter_error(self._text, "missing ')'")
        return terms

    def _term(self) -> list[Comparison]:
        if self._peek() == _Token("paren", "("):
            self._take()
            return self._sequence(inside_parens=True)
        return [self._comparison()]

    def _comparison(self) -> Comparison:
        field_token = self._take()
        if field_token.kind != "word" or not _FIELD_PATH.fullmatch(field_token.text):
            raise _filter_error(self._text, f"expected a field name, got {field_token.text!r}")
        path = tuple(field_token.text.split("."))
        _check_filter_field(path)
        op = self._take()
        if op.kind == "word" and op.text in ("eq", "ne"):
            raise unsupported("A regular-expression filter (eq/ne)")
        if op.kind != "op":
            raise _filter_error(self._text, f"expected an operator after {field_token.text!r}")
        value = self._take()
        return self._compare(path, op.text, value)

    def _compare(self, path: tuple[str, ...], op: str, value: _Token) -> Comparison:
        if op == ":" and value == _Token("word", "*"):
            return Comparison(path, ":*", "")
        if op not in ("=", "!="):
            raise unsupported(f"The filter operator {op!r}")
        if value.kind not in ("word", "quoted"):
            raise _filter_error(self._text, f"expected a value after {op!r}")
        text = _unquote(value.text) if value.kind == "quoted" else value.text
        if "*" in text:
            raise unsupported("A wildcard in a filter value")
        return Comparison(path, op, text)


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted[1:-1])


def _check_filter_field(path: tuple[str, ...]) -> None:
    """The path must name a scalar of Instance (``labels.KEY`` names a label value)."""
    schema: Mapping[str, Any] = schemas()["Instance"]
    for index, part in enumerate(path):
        if schema.get("type") == "array":
            raise unsupported(f"Filtering inside the repeated field {'.'.join(path[:index])!r}")
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        if part in properties:
            schema = resolve(properties[part])
        elif extra is not None and index > 0:
            schema = resolve(extra)
        else:
            raise invalid("filter", ".".join(path), f"Invalid field name '{part}'.")
    if schema.get("type") in ("object", "array"):
        raise unsupported(f"Filtering on the non-scalar field {'.'.join(path)!r}")


def parse_filter(text: str) -> list[Comparison]:
    """The comparisons that must all hold (none for an empty filter)."""
    return _FilterParser(text).parse() if text.strip() else []


def max_results(raw: str | None) -> int:
    if raw is None:
        return MAX_RESULTS
    if not raw.isdigit():
        raise invalid("maxResults", raw, "Must be an integer.")
    if int(raw) > MAX_RESULTS:
        raise invalid("maxResults", raw, f"Must be less than or equal to {MAX_RESULTS}")
    return int(raw) or MAX_RESULTS  # 0, like leaving it out, means the default


def page_token(after: str, filter_text: str) -> str:
    """Opaque to clients; a cursor (the last name served), so deletions between pages
    neither skip nor repeat instances."""
    return base64.urlsafe_b64encode(json.dumps([after, filter_text]).encode()).decode()


def page_after(token: str | None, filter_text: str) -> str:
    if not token:
        return ""
    try:
        after, token_filter = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error):
        raise invalid("pageToken", token, "Invalid page token.") from None
    if token_filter != filter_text or not isinstance(after, str):
        raise invalid("pageToken", token, "The page token belongs to another list request.")
    return after


def aggregated_page(
    collection: str, kind: str, key: str, by_zone: Mapping[str, list[Any]], zones: Iterable[str]
) -> dict[str, Any]:
    """One page of an ``aggregatedList``: each zone's items under ``zones/Z`` (``key``:
    "instances", "reservations"), a zone with none on the page carrying the warning the
    API puts there instead. The caller adds ``nextPageToken``."""
    items: dict[str, Any] = {}
    for zone in sorted(zones):
        scope = f"zones/{zone}"
        if zone in by_zone:
            items[scope] = {key: by_zone[zone]}
        else:
            items[scope] = {"warning": _no_results_warning(scope)}
    return {"kind": kind, "id": collection, "items": items, "selfLink": f"{API_ROOT}{collection}"}


def _no_results_warning(scope: str) -> dict[str, Any]:
    """What aggregatedList puts in place of a scope's list when it has none on the page."""
    return {
        "code": "NO_RESULTS_ON_PAGE",
        "message": f"There are no results for scope '{scope}' on this page.",
        "data": [{"key": "scope", "value": scope}],
    }
