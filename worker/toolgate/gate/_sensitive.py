"""Secrets and personal data in what reaches the agent: found, then rejected or redacted.

Every string of an accepted success envelope is screened after projection: the projected
``data`` (nested objects, arrays of objects, arrays of strings), ``untrusted_text`` (display
text, an MCP result's text blocks, which is also what ``toolgate mcp-proxy`` passes to its
host). Nothing else leaves: a failure envelope holds codes only.

Detectors are data (:data:`DETECTORS`): one RE2 pattern each (linear time, no backtracking,
never Python's ``re`` on untrusted text) and, where the format has one, a check that the
candidate must pass: the Luhn digit of a card number, the ISO 13616 check digits and the
country's length of an IBAN, the digit count of a phone number. The credential formats are
the published token formats their issuers document (AWS key ids, GitHub's ``gh?_`` and
``github_pat_`` tokens, GitLab's ``glpat-``, Slack's ``xox?-`` tokens and webhook URLs,
Stripe's secret and restricted keys, Google API keys, JWTs, PEM private key blocks, URLs
with a password, ``Authorization`` values), the same ones gitleaks' and detect-secrets'
rule sets key on; they are written here as RE2 patterns of our own so that each is
anchored on its fixed prefix, compiles under RE2 (a test holds every one to it) and is
tested against a generated corpus of well-formed tokens and a benign one (UUIDs, git
SHAs, SHA-256 digests, base64 images, dates, versions, request ids).

Each contract decides (``sensitive`` in ``contract.yaml``, :class:`Sensitive`)::

    sensitive:
      secrets: reject          # reject (the default) | redact
      personal: redact         # reject | redact | allow (the default)
      allow:
        - pointer: /data/author_email
          reason: the commit author is what the tool is asked for

``reject`` is ``SENSITIVE_DATA`` at stage ``semantic``, its detail naming the class and
the pointer (never the value); ``redact`` replaces each span with ``[redacted:<class>]``.
``allow`` pointers (``*`` for every item, as in ``projection``) are not screened at all.

Cost: every string of one envelope is joined and searched once with one pattern holding
every detector; only an envelope that has a candidate is walked again string by string,
detector by detector. Each string is screened alone: a secret cut in two across two
fields is found only where one part still has its format (a PEM block's header does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, NamedTuple

import msgspec
import re2

from toolgate._errors import ContractError, RejectedInput

Kind = Literal["secret", "personal"]
MAX_FINDINGS = 64  # candidates looked at per string and detector: bounded work on hostile text
# RE2's memory per compiled pattern (its DFA cache lives within it; past it RE2 resets the
# cache, never grows): bounded memory whatever the text, about 40 MiB for every pattern here.
_OPTIONS = re2.Options()
_OPTIONS.max_mem = 2 << 20
_ANY_MAX_MEM = 8 << 20


class SensitiveAllow(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A pointer whose strings are not screened, and why (for reviewers)."""

    pointer: str
    reason: str


class Sensitive(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``sensitive`` in ``contract.yaml``: what to do with a secret and with personal data."""

    secrets: Literal["reject", "redact"] = "reject"
    personal: Literal["reject", "redact", "allow"] = "allow"
    allow: tuple[SensitiveAllow, ...] = ()


DEFAULT_POLICY: Final = Sensitive()


def luhn(digits: str) -> bool:
    """Whether a string of ASCII digits ends with its Luhn check digit."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(text: str) -> bool:
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and luhn(digits)


# ISO 13616: the length of each country's IBAN (the SWIFT registry).
IBAN_LENGTHS: Final = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FO", "GL", "NL"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "XK"], 20),
    **dict.fromkeys(["CH", "CR", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["IQ", "JO", "KW", "MU"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
}


def iban_valid(text: str) -> bool:
    """Whether ``text`` (spaces allowed) is an IBAN of a known country with its length and
    check digits (mod 97 of the rearranged number is 1)."""
    iban = text.replace(" ", "")
    if IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    number = "".join(str(int(ch, 36)) for ch in iban[4:] + iban[:4])
    return int(number) % 97 == 1


def _phone(text: str) -> bool:
    return 8 <= sum(ch.isdigit() for ch in text) <= 15


class Detector(NamedTuple):
    """One class of sensitive data: its name (the redaction marker's), kind, RE2 pattern
    and the check a candidate must pass (None: the pattern is the evidence)."""

    name: str
    kind: Kind
    pattern: str
    check: Callable[[str], bool] | None = None


DETECTORS: Final[tuple[Detector, ...]] = (
    Detector(
        "private-key",
        "secret",
        r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]*?-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
    ),
    Detector("aws-access-key", "secret", r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b"),
    Detector("github-token", "secret", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{82,})\b"),
    Detector("gitlab-token", "secret", r"\bgl(?:pat|dt|ptt|rt|oas|cbt)-[A-Za-z0-9_-]{20,}"),
    Detector("slack-token", "secret", r"\bxox[abposre]-[A-Za-z0-9-]{10,}"),
    Detector(
        "slack-webhook", "secret", r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9/_+-]{20,}"
    ),
    Detector("stripe-key", "secret", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}\b"),
    Detector("google-api-key", "secret", r"\bAIza[0-9A-Za-z_-]{35}"),
    Detector("jwt", "secret", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    Detector(
        "connection-string",
        "secret",
        r"\b[A-Za-z][A-Za-z0-9+.-]+://[^\s:@/?#\"'<>]*:[^\s@/?#\"'<>]+@[^\s/?#:\"'<>]+",
    ),
    Detector(
        "authorization",
        "secret",
        r"(?i:\b(?:proxy-)?authorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token|digest|negotiate"
        r"|apikey)?\s*[A-Za-z0-9._~+/=-]{8,}|\bbearer\s+[A-Za-z0-9._~+/-]{20,}=*)",
    ),
    Detector(
        "card",
        "personal",
        r"\b(?:[2-6][0-9]{12,18}|[2-6][0-9]{3}(?:[ -][0-9]{4}){2}[ -][0-9]{1,7}"
        r"|3[0-9]{3}[ -][0-9]{6}[ -][0-9]{5})\b",
        _card,
    ),
    Detector(
        "iban", "personal", r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b", iban_valid
    ),
    Detector(
        "email",
        "personal",
        r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
    ),
    Detector(
        "phone",
        "personal",
        r"(?:\+[1-9][0-9]{0,2}[ .-]?(?:\([0-9]{1,4}\)[ .-]?)?[0-9]{1,4}(?:[ .-]?[0-9]{2,4}){1,5}\b"
        r"|\([0-9]{3}\) ?[0-9]{3}-[0-9]{4}\b|\b[0-9]{3}[-.][0-9]{3}[-.][0-9]{4}\b)",
        _phone,
    ),
)
CLASSES: Final = tuple(d.name for d in DETECTORS)


def _compile(pattern: str) -> Any:
    return re2.compile(pattern, options=_OPTIONS)


_COMPILED: Final = tuple((d, _compile(d.pattern)) for d in DETECTORS)


class _Search:
    """Whether any of some detectors' patterns matches: one RE2 search over UTF-8 bytes, no
    capture (the binding's lowest level: the per-call cost is most of what most envelopes
    pay)."""

    __slots__ = ("_match",)

    def __init__(self, detectors: tuple[Detector, ...]) -> None:
        options = re2.Options()
        options.max_mem = _ANY_MAX_MEM
        options.never_capture = True
        self._match = re2.compile(
            "|".join(f"(?:{d.pattern})" for d in detectors), options=options
        )._regexp.Match

    def __call__(self, text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        found: tuple[int, int] = self._match(_UNANCHORED, data, 0, len(data))[0]
        return found != _NO_MATCH


_UNANCHORED: Final = re2._Anchor.UNANCHORED
_NO_MATCH: Final = (-1, -1)
# Every detector in one pattern: the one search most envelopes need; the secrets alone where
# a contract allows personal data (the default).
_ANY: Final = _Search(DETECTORS)
_SECRETS: Final = _Search(tuple(d for d in DETECTORS if d.kind == "secret"))


class Finding(NamedTuple):
    """One span found in one string."""

    start: int
    end: int
    detector: Detector


def find(text: str) -> list[Finding]:
    """The checked findings of ``text``, without overlaps (of two overlapping spans, the
    one starting first, a secret before personal data at the same start), in order."""
    if not _ANY(text):
        return []
    found: list[Finding] = []
    for detector, pattern in _COMPILED:
        check = detector.check
        for n, match in enumerate(pattern.finditer(text)):
            if n >= MAX_FINDINGS:
                break
            start, end = match.span()
            if check is None or check(text[start:end]):
                found.append(Finding(start, end, detector))
    found.sort(key=lambda f: (f.start, f.detector.kind != "secret", -f.end))
    merged: list[Finding] = []
    for finding in found:
        if merged and finding.start < merged[-1].end:
            last = merged[-1]
            if finding.end > last.end:  # overlapping: one span covers both
                merged[-1] = Finding(last.start, finding.end, last.detector)
            continue
        merged.append(finding)
    return merged


def redact(text: str, findings: list[Finding]) -> str:
    """``text`` with each finding's span replaced by ``[redacted:<class>]``."""
    parts: list[str] = []
    at = 0
    for finding in findings:
        parts.append(text[at : finding.start])
        parts.append(f"[redacted:{finding.detector.name}]")
        at = finding.end
    parts.append(text[at:])
    return "".join(parts)


Path = tuple[str, ...]


def _strings(node: Any, path: Path) -> Iterator[tuple[Path, Any, Any, str]]:
    """(path, container, index or name, string) of every string under ``node``."""
    if isinstance(node, dict):
        items: Any = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return
    for name, value in items:
        if type(value) is str:
            yield (*path, str(name)), node, name, value
        elif isinstance(value, (dict, list)):
            yield from _strings(value, (*path, str(name)))


def _texts(node: Any, into: list[str]) -> None:
    if isinstance(node, dict):
        node = node.values()
    for value in node:
        if type(value) is str:
            into.append(value)
        elif isinstance(value, (dict, list)):
            _texts(value, into)


def _pointer(path: Path) -> str:
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in path)


class Screen:
    """One contract's screen: finds, then rejects or redacts, in a projected envelope.

    Args:
        policy: the contract's ``sensitive`` (None: :data:`DEFAULT_POLICY`).
        display: ``(untrusted_text name, contract pointer tokens)`` of each display text,
            so that an ``allow`` pointer names a display text by its contract pointer.
        allowed: the ``allow`` pointers, as tokens (``*``: every item).
        limits: the most characters each ``untrusted_text`` member may hold (a redacted
            string is cut to it; a ``data`` string to 4096).
    """

    __slots__ = ("_actions", "_allowed", "_display", "_limits", "_search", "policy")

    def __init__(
        self,
        policy: Sensitive | None,
        *,
        display: dict[str, Path] | None = None,
        allowed: tuple[Path, ...] = (),
        limits: dict[str, int] | None = None,
    ) -> None:
        self.policy = policy or DEFAULT_POLICY
        self._actions: dict[Kind, str] = {"secret": self.policy.secrets, "personal": self.policy.personal}
        self._display = display or {}
        self._allowed = allowed
        self._limits = limits or {}
        self._search = _SECRETS if self.policy.personal == "allow" else _ANY

    def apply(self, out: dict[str, Any]) -> None:
        """Screen the envelope ``out`` in place: redact, or raise.

        Raises:
            RejectedInput: ``semantic`` / ``SENSITIVE_DATA``, naming the class and pointer.
        """
        texts: list[str] = []
        data = out.get("data")
        if data:
            _texts(data, texts)
        shown = out.get("untrusted_text")
        if shown:
            _texts(shown, texts)
        if not texts or not self._search("\n".join(texts)):
            return
        edits: list[tuple[Any, Any, str]] = []
        rejected: list[tuple[Finding, str]] = []
        for path, container, name, text in self._walk(out):
            if self._allowed and self._is_allowed(path):
                continue
            findings = [f for f in find(text) if self._actions[f.detector.kind] != "allow"]
            if not findings:
                continue
            for finding in findings:
                if self._actions[finding.detector.kind] == "reject":
                    rejected.append((finding, _pointer(path)))
            redacted = redact(text, findings)
            edits.append((container, name, redacted[: self._limit(path)]))
        if rejected:
            first, pointer = rejected[0]
            more = f"; {len(rejected) - 1} more finding(s)" if len(rejected) > 1 else ""
            raise RejectedInput(
                "semantic",
                "SENSITIVE_DATA",
                f"{first.detector.kind} ({first.detector.name}) at {pointer}{more}",
                instance_path=pointer,
                keyword=first.detector.name,  # the class, in clear where a sealed record hides the detail
            )
        for container, name, text in edits:
            container[name] = text

    def _walk(self, out: dict[str, Any]) -> Iterator[tuple[Path, Any, Any, str]]:
        data = out.get("data")
        if isinstance(data, dict):
            yield from _strings(data, ("data",))
        shown = out.get("untrusted_text")
        if isinstance(shown, dict):
            yield from _strings(shown, ("untrusted_text",))

    def _limit(self, path: Path) -> int:
        if path[0] == "untrusted_text":
            return self._limits.get(path[1], 4096)
        return 4096

    def _is_allowed(self, path: Path) -> bool:
        if path[0] == "untrusted_text" and path[1] in self._display:
            path = self._display[path[1]]
        for allowed in self._allowed:
            if len(allowed) <= len(path) and all(
                a == p or (a == "*" and p.isdigit()) for a, p in zip(allowed, path, strict=False)
            ):
                return True
        return False


MCP_TEXT_POINTER: Final = "/untrusted_text/content"  # an MCP result's text blocks, in allow


def check_policy(
    policy: Sensitive | None, where: str, projected: tuple[str, ...], display: tuple[str, ...], mcp_text: bool
) -> tuple[Path, ...]:
    """The ``allow`` pointers of ``policy`` as tokens, each checked: it names a projected
    field (or an item or member under one), a display text, or an MCP result's text.

    Raises:
        ContractError: naming ``where`` and the path of the mistake.
    """
    if policy is None:
        return ()
    known = [_tokens(p) for p in (*projected, *display)]
    if mcp_text:
        known.append(_tokens(MCP_TEXT_POINTER))
    allowed: list[Path] = []
    for i, entry in enumerate(policy.allow):
        at = f"$.sensitive.allow[{i}]"
        if not entry.pointer.startswith("/"):
            raise ContractError(where, f"{at}.pointer", "must be a JSON Pointer (start with /)")
        tokens = _tokens(entry.pointer)
        if not any(_covers(tokens, k) or _covers(k, tokens) for k in known):
            raise ContractError(where, f"{at}.pointer", "names no projected field, display text or MCP text")
        if len(entry.reason.strip()) < 10:
            raise ContractError(where, f"{at}.reason", "give the reason this field may carry such data")
        allowed.append(tokens)
    return tuple(allowed)


def _tokens(pointer: str) -> Path:
    return tuple(t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:])


def _covers(prefix: Path, path: Path) -> bool:
    return len(prefix) <= len(path) and all(
        a == p or a == "*" or p == "*" for a, p in zip(prefix, path, strict=False)
    )


def screen_for(
    policy: Sensitive | None,
    allowed: tuple[Path, ...],
    display: tuple[tuple[int, Path], ...],
    mcp_text_length: int | None,
) -> Screen:
    """The screen of one contract version: its policy, allow pointers, display texts (as
    ``(max_length, pointer tokens)``) and an MCP result's text length (None: no MCP)."""
    names = {tokens[-1]: tokens for _, tokens in display}
    limits = {tokens[-1]: limit for limit, tokens in display}
    if mcp_text_length is not None:
        names.setdefault("content", _tokens(MCP_TEXT_POINTER))
        limits.setdefault("content", mcp_text_length)
    return Screen(policy, display=names, allowed=allowed, limits=limits)
