"""``toolgate top``: a live terminal view of one worker's ``/metrics``, for people without Grafana.

Scrapes the Prometheus text the worker serves, and shows results by tool and
outcome, rejections by code, consumer lag, gate latency, transactions and the
request store. Rates are the difference between two scrapes divided by the time
between them (a counter that went down was reset: its whole value counts); the
first screen, with nothing to compare with, shows totals since the worker
started. Latency quantiles are interpolated in the histogram's buckets the way
Prometheus's ``histogram_quantile`` does, over the last interval when there is
one.
"""

from __future__ import annotations

import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TextIO

from prometheus_client.parser import text_string_to_metric_families

from toolgate._errors import ConfigError

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen
WIDTH = 80  # every line of a screen fits an 80-column terminal
CODES_PER_TOOL = 3
Labels = tuple[tuple[str, str], ...]
_MAX_BODY = 8 * 1024 * 1024


@dataclass(frozen=True)
class Snapshot:
    """One scrape: every sample by (sample name, sorted labels), and when it was taken."""

    at: float
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def series(self, name: str) -> list[tuple[dict[str, str], float]]:
        """Every sample called ``name`` with its labels."""
        return [(dict(labels), value) for (sample, labels), value in self.samples.items() if sample == name]

    def value(self, name: str, **labels: str) -> float | None:
        """The sample with exactly these labels, or None."""
        return self.samples.get((name, tuple(sorted(labels.items()))))


def default_url(host: str, port: int) -> str:
    """The metrics URL of a worker configured to listen on ``host``:``port`` (a wildcard
    listen address is reached on the loopback)."""
    if host in ("", "0.0.0.0", "::"):  # noqa: S104 - compared, not bound
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/metrics"


def parse(text: str, at: float) -> Snapshot:
    """Parse Prometheus text exposition into a snapshot taken at ``at`` (monotonic seconds).

    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    samples: dict[tuple[str, Labels], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return Snapshot(at, samples)


def scrape(url: str, *, timeout: float = 5.0, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """Fetch and parse ``url``.

    Raises:
        ConfigError: the endpoint cannot be reached or does not serve Prometheus text;
            the message names the URL.
    """
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"top: {url}: not an http:// or https:// URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - scheme checked
            body = response.read(_MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        raise ConfigError(f"top: {url} answered HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(
            f"top: cannot reach {url}: {reason} (is the worker running? Its port is "
            "TOOLGATE_METRICS_PORT, default 9464)"
        ) from exc
    if len(body) > _MAX_BODY:
        raise ConfigError(f"top: {url}: more than {_MAX_BODY} bytes of metrics")
    try:
        return parse(body.decode("utf-8"), clock())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"top: {url} does not serve Prometheus text: {exc}") from exc


# --------------------------------------------------------------------------- arithmetic


def delta(current: float, previous: float | None) -> float:
    """Counter increase between two scrapes; a counter that went down was reset."""
    if previous is None or current < previous:
        return current
    return current - previous


def rate(current: Snapshot, previous: Snapshot | None, name: str, labels: dict[str, str]) -> float | None:
    """Per-second increase of one counter series between two scrapes (None without a previous one)."""
    if previous is None or current.at <= previous.at:
        return None
    now = current.value(name, **labels)
    if now is None:
        return None
    return delta(now, previous.value(name, **labels)) / (current.at - previous.at)


def quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """The ``q`` quantile of a histogram given as (upper bound, cumulative count) pairs.

    Linear interpolation inside the bucket that holds the rank, like Prometheus's
    ``histogram_quantile``; the lowest bucket starts at 0; a rank in the +Inf bucket
    gives the highest finite bound. None when the histogram holds no observation.
    """
    ordered = sorted(buckets)
    if not ordered or not math.isinf(ordered[-1][0]):
        return None
    total = ordered[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in ordered:
        if count >= rank:
            if math.isinf(upper):
                return lower
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def histogram(
    current: Snapshot, previous: Snapshot | None, name: str, **match: str
) -> list[tuple[float, float]]:
    """(le, cumulative count) of the ``name`` histogram series matching ``match``, summed
    over other labels; over the last interval when ``previous`` is given."""
    sums: dict[float, float] = {}
    for labels, value in current.series(f"{name}_bucket"):
        if any(labels.get(k) != v for k, v in match.items()):
            continue
        le = float(labels["le"])
        before = None
        if previous is not None:
            before = previous.value(f"{name}_bucket", **labels)
        sums[le] = sums.get(le, 0.0) + (value if previous is None else delta(value, before))
    return sorted(sums.items())


@dataclass
class CodeRow:
    """Rejections of one code, summed over tools and stages."""

    code: str
    total: float = 0.0
    rate: float | None = None
    stages: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)


def rejections_by_code(current: Snapshot, previous: Snapshot | None) -> list[CodeRow]:
    """Rejections by code, highest rate first (highest total without a previous scrape)."""
    rows: dict[str, CodeRow] = {}
    for labels, value in current.series("toolgate_rejections_total"):
        code = labels.get("code", "")
        row = rows.get(code)
        if row is None:
            row = rows[code] = CodeRow(code, rate=None if previous is None else 0.0)
        row.total += value
        r = rate(current, previous, "toolgate_rejections_total", labels)
        if row.rate is not None and r is not None:
            row.rate += r
        row.stages.add(labels.get("stage", ""))
        row.tools.add(labels.get("tool", ""))
    return sorted(rows.values(), key=lambda row: (-(row.rate or 0.0), -row.total, row.code))


@dataclass
class ToolRow:
    """One tool's decisions and rejections: over the last interval, or totals on the first screen."""

    tool: str
    decided: float = 0.0
    rejected: float = 0.0
    codes: list[tuple[str, str, float, float | None]] = field(default_factory=list)
    # (code, stage, count, first seen: unix seconds from the counter's _created sample)

    @property
    def ratio(self) -> float | None:
        """Rejected share of the tool's results (None when it decided nothing)."""
        return self.rejected / self.decided if self.decided else None


def rejections_by_tool(current: Snapshot, previous: Snapshot | None) -> list[ToolRow]:
    """Per tool: results, rejected share and its codes (most frequent first), highest ratio first.

    Over the last interval when ``previous`` is given (a tool idle in it has no ratio),
    totals since the worker started otherwise. A code's "first seen" is when the worker
    counted its first rejection of that code for that tool (the counter's ``_created``).
    """
    interval = previous is not None and current.at > previous.at
    rows: dict[str, ToolRow] = {}

    def amount(name: str, labels: dict[str, str], value: float) -> float:
        if not interval:
            return value
        assert previous is not None
        return delta(value, previous.value(name, **labels))

    for labels, value in current.series("toolgate_results_total"):
        if value == 0:
            continue
        tool = labels.get("tool", "")
        row = rows.setdefault(tool, ToolRow(tool))
        n = amount("toolgate_results_total", labels, value)
        row.decided += n
        if labels.get("outcome") == "rejected":
            row.rejected += n
    codes: dict[tuple[str, str, str], tuple[float, float, float | None]] = {}
    for labels, value in current.series("toolgate_rejections_total"):
        key = (labels.get("tool", ""), labels.get("code", ""), labels.get("stage", ""))
        n = amount("toolgate_rejections_total", labels, value)
        created = current.value("toolgate_rejections_created", **labels)
        was_n, was_total, was_created = codes.get(key, (0.0, 0.0, None))
        first = min((t for t in (created, was_created) if t is not None), default=None)
        codes[key] = (was_n + n, was_total + value, first)
    for (tool, code, stage), (n, total, first) in codes.items():
        if tool in rows and total:
            rows[tool].codes.append((code, stage, n, first))
    for row in rows.values():
        row.codes.sort(key=lambda c: (-c[2], c[0], c[1]))
    return sorted(rows.values(), key=lambda r: (-(r.ratio or 0.0), -r.rejected, r.tool))


# --------------------------------------------------------------------------- rendering


def _safe(text: str, width: int = 32) -> str:
    """A label value fit for a terminal: printable, bounded (the URL could be anything)."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"


def _num(value: float, width: int = 12) -> str:
    """A count with thousands separators, in at most ``width - 1`` characters (k, M, G beyond)."""
    text = f"{value:,.0f}"
    for scale, unit in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")):
        if len(text) < width:
            break
        text = f"{value / scale:,.1f}{unit}"
    return text


def _name(text: str, width: int) -> str:
    """A tool name cut to ``width``, keeping what tells tools apart.

    An MCP tool is ``<server>.<tool>``: its server is cut first, so the tool's own name stays
    whole while it fits (``deplo….deploy_status``); any other name is cut in the middle, the
    start and the end telling connectors apart.
    """
    cleaned = _safe(text, 10_000)
    if len(cleaned) <= width:
        return cleaned
    server, dot, tool = cleaned.partition(".")
    if dot and server and len(tool) + 3 <= width:
        return server[: width - len(tool) - 2] + "…." + tool
    tail = (width - 1) // 3
    return cleaned[: width - 1 - tail] + "…" + cleaned[len(cleaned) - tail :]


def _name_width(names: Iterable[str], narrowest: int, widest: int) -> int:
    """A name column as wide as its longest name, within ``narrowest`` and ``widest``."""
    return max(narrowest, min(widest, max((len(_safe(n, 10_000)) for n in names), default=0)))


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def _since(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return "since " + datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _wrap(head: str, items: list[str], width: int = WIDTH, sep: str = ",") -> list[str]:
    """``head`` then the items, separated by ``sep``, continued on indented lines at ``width``."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (sep if i < len(items) - 1 else "")
        if len(line) + 1 + len(piece) > width and line.strip():
            lines.append(line)
            line = " " * min(len(head), 11)
        line = f"{line} {piece}" if line.strip() else line + piece
    lines.append(line)
    return lines


def _fit(line: str, width: int = WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _no_lag(ready: float | None, owned: float | None) -> str:
    """Why there is no lag to show: a ready worker owning nothing is a standby, not waiting."""
    if ready == 1 and owned == 0:
        return "  (standby: owns no partition; more workers than intake partitions)"
    return "  (no partition assigned yet)"


def render(current: Snapshot, previous: Snapshot | None, *, url: str, top: int = 10) -> str:
    """One screen of text (no escape codes, at most :data:`WIDTH` columns) for ``current``,
    with rates since ``previous``."""
    lines: list[str] = []
    ready = current.value("toolgate_ready")
    owned = current.value("toolgate_owned_partitions")
    state = "ready" if ready == 1 else "NOT READY" if ready is not None else "readiness unknown"
    if ready == 1 and owned == 0:
        state = "ready (standby)"
    if previous is None or current.at <= previous.at:
        basis = "totals since the worker started (rates from the next screen on)"
    else:
        basis = f"rates over the last {current.at - previous.at:.1f} s"
    lines.append(f"toolgate top  {state}  {_safe(url, WIDTH - 16 - len(state))}")
    lines.append(basis)
    versions: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    for lab, value in current.series("toolgate_contract_info"):
        if value:
            version = lab.get("version", "")
            order = tuple(int(p) for p in version.split(".") if p.isdigit())
            text = f"v{_safe(version, 8)} ({_safe(lab.get('status', ''), 8)})"
            versions.setdefault(lab.get("tool", ""), []).append((order, text))
    if not versions:
        lines.append("contracts: none reported")
    elif sum(len(found) for found in versions.values()) <= 4 and len(versions) <= 2:
        lines += _wrap(
            "contracts:",
            [
                f"{_name(tool, 30)} " + " ".join(text for _, text in sorted(found))
                for tool, found in sorted(versions.items())
            ],
            sep=";",
        )
    else:
        lines.append("contracts:")
        for tool, found in sorted(versions.items()):
            lines += _wrap(f"  {_name(tool, 30)}", [text for _, text in sorted(found)], sep="")

    results = sorted(
        current.series("toolgate_results_total"),
        key=lambda item: (item[0].get("tool", ""), item[0].get("outcome", "")),
    )
    # The tool column takes what the numbers leave of the 80 columns (MCP names are long).
    tool_w = _name_width((labels.get("tool", "") for labels, _ in results), 15, WIDTH - 35) + 1
    lines += ["", f"{'RESULTS':<{tool_w}}{'outcome':<10}{'total':>12}{'rate/s':>12}"]
    total, total_rate = 0.0, 0.0 if previous is not None else None
    for labels, value in results:
        r = rate(current, previous, "toolgate_results_total", labels)
        if value == 0 and not r:
            continue  # pre-initialised series: nothing decided yet
        lines.append(
            f"{_name(labels.get('tool', ''), tool_w - 1):<{tool_w}}{_safe(labels.get('outcome', ''), 9):<10}"
            f"{_num(value):>12}{_rate(r):>12}"
        )
        total += value
        if total_rate is not None and r is not None:
            total_rate += r
    lines.append(f"{'all':<{tool_w + 10}}{_num(total):>12}{_rate(total_rate):>12}")

    tools = rejections_by_tool(current, previous)
    counted = "last interval" if previous is not None and current.at > previous.at else "totals"
    lines += [
        "",
        f"{f'REJECTION RATIO BY TOOL ({counted})':<40}{'rejected':>10}{'of':>10}{'ratio':>9}",
        f"{'  its top codes':<28}{'stage':<10}{'count':>9}  first seen (UTC)",
    ]
    per_tool = min(CODES_PER_TOOL, top)
    for row_ in tools:
        ratio = "-" if row_.ratio is None else f"{row_.ratio:.1%}"
        lines.append(
            f"{_name(row_.tool, 39):<40}{_num(row_.rejected, 10):>10}{_num(row_.decided, 10):>10}{ratio:>9}"
        )
        for code, where, count, first in row_.codes[:per_tool]:
            lines.append(f"  {_name(code, 25):<26}{_safe(where, 9):<10}{_num(count, 9):>9}  {_since(first)}")
        if len(row_.codes) > per_tool:
            lines.append(f"  ... {len(row_.codes) - per_tool} more codes")
    if not tools:
        lines.append("none")

    rows = rejections_by_code(current, previous)
    lines += [
        "",
        f"{f'REJECTIONS BY CODE (top {top})':<29}{'stage':<10}{'tools':<20}{'total':>10}{'rate/s':>10}",
    ]
    for row in rows[:top]:
        lines.append(
            f"{_name(row.code, 28):<29}{_safe(','.join(sorted(row.stages)), 9):<10}"
            f"{_safe(','.join(sorted(row.tools)), 19):<20}{_num(row.total, 10):>10}"
            f"{_rate(row.rate):>10}"
        )
    if not rows:
        lines.append("none")
    elif len(rows) > top:
        lines.append(f"... {len(rows) - top} more codes (raise --top)")

    lines += ["", f"{'CONSUMER LAG':<16}{'records':>12}"]
    lag = sorted(
        current.series("toolgate_consumer_lag"),
        key=lambda item: (len(item[0].get("partition", "")), item[0].get("partition", "")),
    )
    for labels, value in lag:
        lines.append(f"{'partition ' + _safe(labels.get('partition', ''), 6):<16}{_num(value):>12}")
    lines.append(f"{'total':<16}{_num(sum(v for _, v in lag)):>12}" + ("" if lag else _no_lag(ready, owned)))

    window = "last interval" if previous is not None and current.at > previous.at else "since start"
    lines += ["", f"{f'GATE LATENCY ({window})':<28}{'results':>8}{'p50':>12}{'p99':>12}"]
    stages = sorted(
        {labels.get("stage", "") for labels, _ in current.series("toolgate_evaluation_seconds_bucket")}
    )
    for stage in [*stages, None]:
        match = {} if stage is None else {"stage": stage}
        buckets = histogram(current, previous, "toolgate_evaluation_seconds", **match)
        count = buckets[-1][1] if buckets else 0.0
        name = "all stages" if stage is None else f"ended at {_safe(stage, 12)}"
        lines.append(
            f"{name:<28}{_num(count, 8):>8}{_seconds(quantile(0.5, buckets)):>12}"
            f"{_seconds(quantile(0.99, buckets)):>12}"
        )

    lines += ["", f"{'TRANSACTIONS':<16}{'total':>12}{'rate/s':>12}"]
    for result in ("committed", "aborted"):
        value = current.value("toolgate_transactions_total", result=result) or 0.0
        r = rate(current, previous, "toolgate_transactions_total", {"result": result})
        lines.append(f"{result:<16}{_num(value):>12}{_rate(r):>12}")
    txn = histogram(current, previous, "toolgate_transaction_seconds")
    lines.append(
        f"{'commit time':<16}p50 {_seconds(quantile(0.5, txn))}  p99 {_seconds(quantile(0.99, txn))}"
    )

    shadows = sorted(
        current.series("toolgate_shadow_disagreements_total"),
        key=lambda item: (item[0].get("tool", ""), item[0].get("version", "")),
    )
    shadow_w = _name_width((labels.get("tool", "") for labels, _ in shadows), 18, WIDTH - 33) + 8
    lines += ["", f"{'SHADOW DISAGREEMENTS':<{shadow_w}}{'total':>12}{'rate/s':>12}"]
    shown = 0
    for labels, value in shadows:
        r = rate(current, previous, "toolgate_shadow_disagreements_total", labels)
        if value == 0 and not r:
            continue
        name = f"{_name(labels.get('tool', ''), shadow_w - 8)} v{_safe(labels.get('version', ''), 5)}"
        lines.append(f"{name:<{shadow_w}}{_num(value):>12}{_rate(r):>12}")
        shown += 1
    if not shown:
        lines.append("none")

    replayed: dict[str, float] = {}
    for labels, value in current.series("toolgate_replayed_results_total"):
        outcome = labels.get("outcome", "")
        replayed[outcome] = replayed.get(outcome, 0.0) + value
    lines.append("")
    lines += _wrap(
        "REPLAYED FROM QUARANTINE ",
        [f"{_safe(outcome, 12)} {_num(value)}" for outcome, value in sorted(replayed.items())]
        if any(replayed.values())
        else ["none"],
    )

    outstanding = current.value("toolgate_outstanding_requests")
    evictions = current.value("toolgate_request_store_evictions_total")
    waits = {
        r: current.value("toolgate_request_waits_total", result=r) or 0.0 for r in ("caught_up", "timeout")
    }
    lines += [
        "",
        "REQUESTS",
        f"outstanding {_num(outstanding or 0.0)}   evicted (store full) {_num(evictions or 0.0)}",
        f"batches that waited for requests: {_num(waits['caught_up'])} caught up, "
        f"{_num(waits['timeout'])} timed out",
    ]
    misrouted = current.value("toolgate_misrouted_results_total") or 0.0
    if misrouted:
        r = rate(current, previous, "toolgate_misrouted_results_total", {})
        lines += [
            f"MISROUTED results {_num(misrouted)} ({_rate(r)}/s): in another intake partition than",
            "  murmur2 puts their key (a producer with another partitioner; librdkafka clients need",
            "  partitioner=murmur2_random): decided UNKNOWN_REQUEST, see README Partitioning",
        ]
    return "\n".join(_fit(line) for line in lines) + "\n"


def run(
    url: str,
    *,
    interval: float,
    once: bool,
    top: int,
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Show the view until interrupted (or one snapshot with ``once``); return the exit code.

    Raises:
        ConfigError: the first scrape failed (later failures are shown on screen and retried).
    """
    first = scrape(url)
    if once:
        if interval <= 0:
            out.write(render(first, None, url=url, top=top))
            return 0
        sleep(interval)
        out.write(render(scrape(url), first, url=url, top=top))
        return 0
    previous: Snapshot | None = None
    current = first
    problem = ""
    while True:
        out.write(CLEAR + render(current, previous, url=url, top=top))
        if problem:
            out.write(f"\nlast scrape failed: {problem} (retrying)\n")
        out.write(f"\nrefreshing every {interval:g} s; Ctrl-C to quit\n")
        out.flush()
        sleep(interval)
        try:
            fresh = scrape(url)
        except ConfigError as exc:
            problem = str(exc)
            continue
        problem = ""
        previous, current = current, fresh
