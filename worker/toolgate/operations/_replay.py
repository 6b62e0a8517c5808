"""``toolgate replay``: send quarantined results through the pipeline again after a fix.

1. **Select** quarantine records by rejection time, tool, stage, code, adapter
   version and origin offsets (all from the diagnostics headers), and print what
   was selected, by tool and code, before doing anything.
2. **Dry run** (the default): re-evaluate each selected record with today's
   contracts, the request record it names (from the requests topic), the accepted
   ledger (from the state changelog) and the real clock. Nothing is written. The table
   says which would now pass, which are still rejected with the same code, and which
   with another code; ``REQUEST_EXPIRED`` means a fresh tool call is needed instead.
3. **Apply**: re-publish the original key, bytes and headers to the intake topic,
   with ``tg-replay-count`` incremented and ``tg-replay-origin`` naming the
   quarantine record; the worker decides again (same checks, same audit). A result
   already accepted for that request attempt becomes ``DUPLICATE_RESULT``, so
   replaying twice never delivers twice; records whose earlier replay was accepted
   (an audit event of the same request and bytes, marked as a replay, not rejected)
   are skipped, and the count is printed. A record replayed ``max_replays`` times
   already is refused (the loop guard). The worker marks replayed decisions in their
   audit event and counts them apart from live traffic.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TextIO

import msgspec

from toolgate._config import Config, Topics
from toolgate._errors import ConfigError
from toolgate.gate._batch import AcceptedView, decide_batch
from toolgate.gate._contracts import version_label
from toolgate.gate._gate import Gate
from toolgate.gate._outputs import DIAGNOSTIC_HEADERS
from toolgate.gate._records import Message, Verdict
from toolgate.gate._rules import Ledger
from toolgate.gate._sealing import KEY_HEADER, Sealer, SealError, sealer_for
from toolgate.operations._quarantine import locked
from toolgate.operations._top import scrape
from toolgate.service._kafka import AiokafkaClients, partitions_of
from toolgate.service._store import AcceptedLedger, RequestTable, TopicReader

REPLAY_ORIGIN = "tg-replay-origin"
_MAX_RECORD_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Selection:
    """Which quarantine records to replay. Empty fields select everything."""

    since: datetime | None = None
    until: datetime | None = None
    tools: frozenset[str] = frozenset()
    stages: frozenset[str] = frozenset()
    codes: frozenset[str] = frozenset()
    adapter_versions: frozenset[str] = frozenset()
    origin_partition: int | None = None
    origin_offsets: tuple[int, int] | None = None  # inclusive range of intake offsets

    def matches(self, record: Quarantined) -> bool:
        """True when the record passes every filter given."""
        h = record.headers
        if self.tools and record.tool not in self.tools:
            return False
        if self.stages and h.get("tg-error-stage", "") not in self.stages:
            return False
        if self.codes and h.get("tg-error-code", "") not in self.codes:
            return False
        if self.adapter_versions and h.get("tg-adapter-version", "") not in self.adapter_versions:
            return False
        if self.since or self.until:
            rejected_at = record.rejected_at
            if rejected_at is None:
                return False
            if self.since and rejected_at < self.since:
                return False
            if self.until and rejected_at >= self.until:
                return False
        if self.origin_partition is not None or self.origin_offsets is not None:
            origin = record.origin
            if origin is None:
                return False
            _, partition, offset = origin
            if self.origin_partition is not None and partition != self.origin_partition:
                return False
            if self.origin_offsets is not None and not (
                self.origin_offsets[0] <= offset <= self.origin_offsets[1]
            ):
                return False
        return True


@dataclass(frozen=True)
class Quarantined:
    """One quarantine record as read back."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    raw_headers: list[tuple[str, bytes]]
    headers: dict[str, str]

    @property
    def tool(self) -> str:
        """The tool of the contract that rejected it, else the tg-tool header."""
        contract = self.headers.get("tg-contract", "")
        return contract.split("@")[0] if contract else self.headers.get("tg-tool", "")

    @property
    def code(self) -> str:
        """The operator code it was rejected with."""
        return self.headers.get("tg-error-code", "")

    @property
    def rejected_at(self) -> datetime | None:
        """When it was rejected."""
        try:
            return datetime.fromisoformat(self.headers.get("tg-rejected-at", ""))
        except ValueError:
            return None

    @property
    def origin(self) -> tuple[str, int, int] | None:
        """(intake topic, partition, offset) it was read from."""
        topic, _, rest = self.headers.get("tg-origin", "").rpartition("/")
        topic, _, partition = topic.rpartition("/")
        try:
            return topic, int(partition), int(rest)
        except ValueError:
            return None

    @property
    def replays(self) -> int:
        """How often it had been replayed when it was quarantined."""
        try:
            return int(self.headers.get("tg-replay-count", "0"))
        except ValueError:
            return 0

    def original(self) -> Message:
        """The message as the adapter sent it: the diagnostics headers removed."""
        headers = [
            (n, v)
            for n, v in self.raw_headers
            if n.lower() not in DIAGNOSTIC_HEADERS and n.lower() != REPLAY_ORIGIN
        ]
        return Message(
            key=self.key,
            value=self.value,
            headers=headers,
            origin=f"replay of quarantine/{self.partition}/{self.offset}",
        )


def open_sealed(records: list[Quarantined], sealer: Sealer | None, out: TextIO) -> list[Quarantined]:
    """The records in clear: a sealed one (gate/_sealing.py) opened with its quarantine key, a
    clear one (written before sealing, or by a worker without a key) as it is. One that does
    not open is left out with one line saying why, and stays in the quarantine."""
    opened: list[Quarantined] = []
    reasons: collections.Counter[str] = collections.Counter()
    for record in records:
        if not any(name == KEY_HEADER for name, _ in record.raw_headers):
            opened.append(record)
            continue
        try:
            if sealer is None:
                raise SealError(locked(record.raw_headers))
            value, headers = sealer.open(record.key, record.value, record.raw_headers)
        except SealError as exc:
            reasons[str(exc)] += 1
            continue
        texts = {n: v.decode("utf-8", "replace") for n, v in headers}
        opened.append(replace(record, value=value, raw_headers=headers, headers=texts))
    for reason, count in sorted(reasons.items()):
        print(f"left out {count} quarantine records: {reason}", file=out)
    return opened


class Progress:
    """A one-line progress bar on a terminal (a line every 10% elsewhere), counting records.

    ``total`` is the number of records when it is known (records to send). Reading a topic,
    only its offsets are known, and transaction markers and compacted-away records take
    offsets too: then ``total`` is None, ``span`` the offsets to read, and :meth:`advance`
    gets the offsets read so far, which move the bar while the count stays the records'.
    """

    def __init__(
        self, label: str, total: int | None, out: TextIO | None = None, *, span: int | None = None
    ) -> None:
        self.label, self.total = label, total
        self.out = sys.stderr if out is None else out  # looked up now: a redirected stderr counts
        self.span = max(total if total is not None else (span or 0), 1)
        self.done = 0
        self.position = 0
        self.started = time.monotonic()
        self._tty = self.out.isatty()
        self._last_tenth = -1

    def advance(self, n: int = 1, *, position: int | None = None) -> None:
        """Count ``n`` more records done (``position``: offsets read so far) and redraw."""
        self.done += n
        self.position = self.done if position is None else position
        fraction = min(self.position / self.span, 1.0)
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        count = f"{self.done}/{self.total} records" if self.total is not None else f"{self.done} records"
        if self._tty:
            bar = "#" * int(fraction * 30)
            self.out.write(f"\r{self.label} [{bar:<30}] {count} {rate:,.0f}/s")
            self.out.flush()
        elif int(fraction * 10) != self._last_tenth:
            self._last_tenth = int(fraction * 10)
            self.out.write(f"{self.label}: {count}, {fraction:.0%} ({rate:,.0f}/s)\n")

    def close(self) -> None:
        """End the progress display with the final count."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        end = "\n" if self._tty else ""
        self.out.write(
            f"{end}{self.label}: {self.done} records in {elapsed:.1f}s ({self.done / elapsed:,.0f}/s)\n"
        )


async def read_quarantine(config: Config, selection: Selection) -> tuple[list[Quarantined], int]:
    """Selected quarantine records (read_committed) and how many were read in all."""
    clients = AiokafkaClients(config)
    consumer = clients.consumer(
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # a failed start leaves its connections open
        raise
    selected: list[Quarantined] = []
    read = 0
    try:
        tps = await partitions_of(clients, config.topics.quarantine)
        if not tps:
            raise ConfigError(
                f"quarantine topic {config.topics.quarantine!r} does not exist on {config.bootstrap} "
                "(TOOLGATE_TOPIC_QUARANTINE names it)"
            )
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        progress = Progress("reading quarantine", None, span=sum(ends[tp] - begins[tp] for tp in tps))
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            before = read
            for tp, records in batches.items():
                for r in records:
                    if r.offset >= ends[tp]:
                        continue
                    read += 1
                    raw_headers = [(n, v or b"") for n, v in (r.headers or ())]
                    record = Quarantined(
                        tp.partition,
                        r.offset,
                        r.key,
                        r.value,
                        raw_headers,
                        {n: v.decode("utf-8", "replace") for n, v in raw_headers},
                    )
                    if selection.matches(record):
                        selected.append(record)
            positions = [min(await consumer.position(tp), ends[tp]) - begins[tp] for tp in tps]
            progress.advance(read - before, position=sum(positions))
        progress.close()
    finally:
        await consumer.stop()
    return selected, read


async def load_state(config: Config, now: datetime) -> tuple[RequestTable, AcceptedLedger]:
    """The request table and accepted ledger as the workers see them now (every partition of
    the requests topic and the state changelog)."""
    requests, ledger = RequestTable(), AcceptedLedger()
    settings = AiokafkaClients(config)
    readers = [
        TopicReader(config.topics.requests, requests.apply, settings),
        TopicReader(config.topics.state, lambda key, value: ledger.apply(key, value, now), settings),
    ]
    try:
        for reader in readers:
            await reader.start()
        for reader in readers:
            await reader.catch_up(120)
    finally:
        for reader in readers:
            await reader.stop()
    return requests, ledger


@dataclass
class DryRunReport:
    """What a replay would do now, per record and in counts."""

    rows: collections.Counter[tuple[str, str, str, str]] = field(default_factory=collections.Counter)
    would_pass: int = 0
    same_code: int = 0
    other_code: int = 0
    expired: int = 0
    guarded: int = 0
    # BAD_SIGNATURE predicted because the key the contract names is not configured here: the
    # workers, with their keyring, may well pass these. keyring_given: any adapter key here.
    unverifiable: int = 0
    missing_keys: set[str] = field(default_factory=set)
    keyring_given: bool = True

    def print(self, out: TextIO) -> None:
        """The table: tool, code then, verdict now, code now, count."""
        print(f"{'tool':<16} {'was':<24} {'now':<16} {'code now':<24} count", file=out)
        for (tool, was, now, code), count in sorted(self.rows.items()):
            print(f"{tool:<16} {was:<24} {now:<16} {code:<24} {count:>5}", file=out)
        print(
            f"\nwould now pass: {self.would_pass}   still rejected, same code: {self.same_code}   "
            f"rejected with another code: {self.other_code}   refused by the loop guard: "
            f"{self.guarded}",
            file=out,
        )
        if self.expired:
            print(
                f"{self.expired} answer requests that have expired: replay cannot help them; "
                "the agent needs a fresh tool call.",
                file=out,
            )
        if self.unverifiable:
            print(self.unverifiable_line(), file=out)

    def unverifiable_line(self) -> str:
        """One line: which BAD_SIGNATURE predictions only say that a key is missing here."""
        keys = ", ".join(sorted(self.missing_keys))
        where = (
            "this dry run has no keyring (--keyring FILE or TOOLGATE_KEYRING)"
            if not self.keyring_given
            else f"the keyring here lacks the key{'s' if len(self.missing_keys) > 1 else ''} {keys}"
        )
        return (
            f"{self.unverifiable} result{'s' if self.unverifiable > 1 else ''} predicted BAD_SIGNATURE "
            f"only because {where}: their contracts "
            f"require a signature by {keys}, which cannot be checked here, so these predictions say "
            "nothing about the results; give the workers' keyring to predict them"
        )


def dry_run(
    records: list[Quarantined],
    gate: Gate,
    requests: RequestTable,
    ledger: AcceptedLedger | Ledger,
    now: datetime,
    max_replays: int,
    *,
    chunk: int = 1000,
) -> DryRunReport:
    """Re-evaluate each record through the worker's own batch decision; write nothing.

    Records are decided in batches of ``chunk`` by :func:`~toolgate.gate._batch.decide_batch`,
    exactly as the worker decides intake (the same request lookup, ledger, duplicate
    detection within a batch and shadow evaluation); what a batch accepts counts as
    accepted for the batches after it, as a committed batch does in the worker.
    """
    report = DryRunReport(keyring_given=bool(gate.keyring.keys))
    unconfigured = {  # contract key -> the signature key it names, where this keyring lacks it
        contract.key: contract.spec.signature.key_id
        for contract in gate.contracts
        if contract.spec.signature is not None and gate.keyring.get(contract.spec.signature.key_id) is None
    }
    eligible: list[Quarantined] = []
    for record in records:
        if record.replays >= max_replays:
            report.guarded += 1
            report.rows[(record.tool, record.code, "refused", "loop guard")] += 1
        else:
            eligible.append(record)
    # The ledger plus what the batches before would have accepted.
    accepted = ledger.batch() if isinstance(ledger, AcceptedLedger) else AcceptedView(ledger)
    for start in range(0, len(eligible), chunk):
        part = eligible[start : start + chunk]
        batch = decide_batch(
            gate,
            [record.original() for record in part],
            requests.get,
            accepted,
            now,
            topics=Topics(),  # nothing is sent
            max_record_bytes=_MAX_RECORD_BYTES,
        )
        for record, decision in zip(part, batch.decisions, strict=True):
            _count(report, record, decision.verdict)
            missing = unconfigured.get(decision.verdict.contract or "")
            if decision.verdict.code == "BAD_SIGNATURE" and missing is not None:
                report.unverifiable += 1
                report.missing_keys.add(missing)
    return report


def _count(report: DryRunReport, record: Quarantined, verdict: Verdict) -> None:
    if verdict.accepted:
        report.would_pass += 1
        report.rows[(record.tool, record.code, "would pass", verdict.code or "-")] += 1
        return
    same = verdict.code == record.code
    report.same_code += same
    report.other_code += not same
    report.expired += verdict.code == "REQUEST_EXPIRED"
    report.rows[(record.tool, record.code, "same code" if same else "other code", verdict.code or "")] += 1


class _ReplayView(msgspec.Struct, frozen=True):
    """The audit fields that say whether a replay was accepted (other fields ignored)."""

    request_id: str | None
    outcome: str
    raw_sha256: str
    kind: str = "decision"
    replay: int = 0


_replay_decoder = msgspec.json.Decoder(_ReplayView)


class ReplayedAccepted:
    """(request id, raw SHA-256) of results a replay got accepted, from the audit topic."""

    def __init__(self) -> None:
        self.accepted: set[tuple[str, str]] = set()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Apply one audit event."""
        if value is None:
            return
        try:
            event = _replay_decoder.decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        if event.kind == "decision" and event.replay and event.outcome != "rejected" and event.request_id:
            self.accepted.add((event.request_id, event.raw_sha256))

    def __contains__(self, record: object) -> bool:
        if not isinstance(record, Quarantined):
            return False
        request_id = (record.key or b"").decode("utf-8", "replace")
        return (request_id, record.headers.get("tg-raw-sha256", "")) in self.accepted


async def replayed_accepted(config: Config, since: datetime) -> ReplayedAccepted:
    """Which results an earlier replay got accepted (audit events since ``since``)."""
    found = ReplayedAccepted()
    reader = TopicReader(
        config.topics.audit, found.apply, AiokafkaClients(config), start_ms=int(since.timestamp() * 1000)
    )
    try:
        await reader.start()
        await reader.catch_up(120)
    finally:
        await reader.stop()
    return found


def replay_headers(record: Quarantined, quarantine_topic: str) -> list[tuple[str, bytes]]:
    """The original headers plus the incremented replay count and where it came from."""
    headers = list(record.original().headers)
    headers.append(("tg-replay-count", str(record.replays + 1).encode()))
    headers.append((REPLAY_ORIGIN, f"{quarantine_topic}/{record.partition}/{record.offset}".encode()))
    return headers


async def apply(
    config: Config, records: list[Quarantined], max_replays: int, *, sent_to: list[str] | None = None
) -> tuple[int, int]:
    """Re-publish to intake; return (sent, refused by the loop guard).

    ``sent_to`` receives, per record sent and in order, where it landed (``intake/P/O``:
    the ``origin`` of the worker's audit event about it).
    """
    eligible = [r for r in records if r.replays < max_replays]
    producer = AiokafkaClients(config).producer(acks="all", enable_idempotence=True, linger_ms=5)
    try:
        await producer.start()
    except BaseException:
        await producer.stop()  # a failed start leaves its connections open
        raise
    progress = Progress("replaying", len(eligible))
    try:
        futures = []
        for record in eligible:
            futures.append(
                await producer.send(
                    config.topics.intake,
                    record.value,
                    key=record.key,
                    headers=replay_headers(record, config.topics.quarantine),
                )
            )
            progress.advance()
        await producer.flush()
        if sent_to is not None:
            for future in futures:
                meta = await future
                sent_to.append(f"{meta.topic}/{meta.partition}/{meta.offset}")
    finally:
        progress.close()
        await producer.stop()
    return len(eligible), len(records) - len(eligible)


def print_selection(records: list[Quarantined], read: int, out: TextIO) -> None:
    """Counts by tool and code of what was selected."""
    counts = collections.Counter((r.tool or "unknown", r.code) for r in records)
    print(f"selected {len(records)} of {read} quarantine records", file=out)
    for (tool, code), count in sorted(counts.items()):
        print(f"  {tool:<16} {code:<24} {count:>6}", file=out)


ContractRow = tuple[str, str, str, str]  # tool, version (1, 1.1), status, digest


def local_contracts(gate: Gate) -> set[ContractRow]:
    """What the local contracts folder holds, as workers report it in toolgate_contract_info."""
    return {(c.spec.tool, version_label(c.spec), c.spec.status, c.digest) for c in gate.contracts}


def worker_contracts(url: str) -> set[ContractRow]:
    """The contract versions a live worker reports on its metrics endpoint.

    Raises:
        ConfigError: the endpoint cannot be read, or reports no toolgate_contract_info.
    """
    snapshot = scrape(url)
    rows = {
        (
            labels.get("tool", ""),
            labels.get("version", ""),
            labels.get("status", ""),
            labels.get("digest", ""),
        )
        for labels, value in snapshot.series("toolgate_contract_info")
        if value
    }
    if not rows:
        raise ConfigError(f"replay: {url} reports no toolgate_contract_info (is it a toolgate worker?)")
    return rows


def contract_differences(local: set[ContractRow], remote: set[ContractRow]) -> list[str]:
    """One line per contract version that differs between the local folder and a worker."""
    by_local = {(t, v): (s, d) for t, v, s, d in local}
    by_remote = {(t, v): (s, d) for t, v, s, d in remote}
    lines = []
    for tool, version in sorted(by_local.keys() | by_remote.keys()):
        mine, theirs = by_local.get((tool, version)), by_remote.get((tool, version))
        name = f"{tool} v{version}"
        if theirs is None:
            lines.append(f"{name}: only in the local contracts ({mine[0]}, digest {mine[1]})")  # type: ignore[index]
        elif mine is None:
            lines.append(f"{name}: only on the worker ({theirs[0]}, digest {theirs[1]})")
        elif mine != theirs:
            lines.append(f"{name}: local {mine[0]}, digest {mine[1]}; worker {theirs[0]}, digest {theirs[1]}")
    return lines


def check_workers(gate: Gate, urls: list[str], *, force: bool, out: TextIO) -> bool:
    """Compare the local contracts with each live worker's; True when replaying may go on.

    Every difference is printed; with ``force`` they are printed as a warning and the
    replay goes on. A worker that cannot be read refuses the replay unless ``force``.
    """
    local = local_contracts(gate)
    differ = False
    for url in urls:
        try:
            remote = worker_contracts(url)
        except ConfigError as exc:
            differ = True
            print(f"cannot compare with the worker at {url}: {exc}", file=out)
            continue
        lines = contract_differences(local, remote)
        if lines:
            differ = True
            print(f"the worker at {url} runs other contracts than the local folder:", file=out)
            for line in lines:
                print(f"  {line}", file=out)
        else:
            print(
                f"the worker at {url} runs the local contracts ({len(local)} versions, digests equal)",
                file=out,
            )
    if differ and not force:
        print(
            "replay refused: the dry run used the local contracts, the workers would decide with theirs. "
            "Deploy the contracts (and reload: SIGHUP) or point --contracts at what they run; "
            "--force replays anyway.",
            file=out,
        )
        return False
    if differ:
        print("--force: replaying although the contracts differ", file=out)
    return True


async def check_group(config: Config, gate: Gate, *, force: bool, out: TextIO) -> bool | None:
    """Compare the local contracts with the set the group's live members decide with (the
    members topic): True when replaying may go on, False when refused, None when no member is
    live there (the caller compares with the workers' metrics URLs instead).

    Members that disagree refuse the replay (what would decide it depends on the partition);
    so does one set that is not the local one. ``force`` prints the refusal as a warning.
    """
    from datetime import UTC

    from toolgate.service._members import disagreeing, live_members, read_members

    try:
        records = await read_members(config, AiokafkaClients(config))
    except ConfigError:
        return None
    members = live_members(records, config.group_id, datetime.now(UTC))
    if not members:
        return None
    mine = gate.contracts
    listing = ", ".join(f"{m.member} {m.label}" for m in members)
    if disagreeing(members):
        problem = (
            f"the live workers of group {config.group_id} decide with different contract sets ({listing})"
        )
    elif members[0].digest != mine.digest:
        problem = (
            f"the live workers of group {config.group_id} decide with {members[0].label}, the local "
            f"contracts are {mine.label}"
        )
    else:
        print(
            f"the {len(members)} live workers of group {config.group_id} run the local contracts "
            f"({mine.label})",
            file=out,
        )
        return True
    if force:
        print(f"--force: replaying although {problem}", file=out)
        return True
    print(
        f"replay refused: {problem}. Roll the contracts out to every worker (toolgate contracts status "
        "shows them) or point --contracts at what they run; --force replays anyway.",
        file=out,
    )
    return False


@dataclass
class Followed:
    """What the worker decided on the replayed records, from the audit topic."""

    decided: dict[str, dict[str, object]] = field(default_factory=dict)  # replay_of -> audit event
    missing: int = 0

    def print(self, records: list[Quarantined], topic: str, out: TextIO) -> None:
        """The table: tool, code it was rejected with, what it is now, count."""
        rows: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        for record in records:
            event = self.decided.get(origin_name(topic, record))
            if event is None:
                rows[(record.tool, record.code, "not decided yet", "-")] += 1
            else:
                outcome = str(event.get("outcome"))
                rows[(record.tool, record.code, outcome, str(event.get("code") or "-"))] += 1
        print(f"{'tool':<16} {'was':<24} {'now':<16} {'code now':<24} count", file=out)
        for (tool, was, now, code), count in sorted(rows.items()):
            print(f"{tool:<16} {was:<24} {now:<16} {code:<24} {count:>5}", file=out)
        accepted = sum(1 for e in self.decided.values() if e.get("outcome") != "rejected")
        print(
            f"\ndecided: {len(self.decided)} of {len(records)}   accepted now: {accepted}   "
            f"rejected again: {len(self.decided) - accepted}   not decided yet: {self.missing}",
            file=out,
        )


def origin_name(topic: str, record: Quarantined) -> str:
    """How a replay names its quarantine record (tg-replay-origin, audit replay_of)."""
    return f"{topic}/{record.partition}/{record.offset}"


async def follow(
    config: Config, records: list[Quarantined], sent_to: list[str], since_ms: int, wait_seconds: float
) -> Followed:
    """Wait (bounded) for the worker's decision on each replayed record, from the audit topic.

    ``sent_to[i]`` is where ``records[i]`` was re-published: the audit event of that intake
    record (its ``origin``) is the decision on this replay, not on an earlier one.
    """
    quarantined = {
        sent: origin_name(config.topics.quarantine, r) for r, sent in zip(records, sent_to, strict=True)
    }
    wanted = set(quarantined.values())
    found = Followed()
    done = asyncio.Event()

    def apply_event(key: bytes | None, value: bytes | None) -> None:
        if value is None:
            return
        try:
            event = json.loads(value)
        except ValueError:
            return
        if not isinstance(event, dict) or event.get("kind", "decision") != "decision":
            return
        of = quarantined.get(str(event.get("origin")))
        if of is not None:
            found.decided[of] = event
            if len(found.decided) == len(wanted):
                done.set()

    reader = TopicReader(config.topics.audit, apply_event, AiokafkaClients(config), start_ms=since_ms)
    try:
        await reader.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), wait_seconds)
    finally:
        await reader.stop()
    found.missing = len(wanted) - len(found.decided)
    return found


async def run_replay(
    config: Config,
    gate: Gate,
    selection: Selection,
    *,
    apply_it: bool,
    max_replays: int,
    now: datetime,
    ledger_window_hours: float = 24.0,
    out: TextIO = sys.stdout,
    workers: list[str] | None = None,
    workers_named: bool = False,
    force: bool = False,
    wait_seconds: float | None = None,
) -> int:
    """The whole command: select, print, then dry-run or apply. Returns the exit code."""
    from datetime import timedelta

    records, read = await read_quarantine(config, selection)
    records = open_sealed(records, sealer_for(gate.keyring), out)
    print_selection(records, read, out)
    if not records:
        print("no records matched: nothing to replay", file=out)
        return 0
    if not apply_it:
        requests, ledger = await load_state(config, now)
        dry_run(records, gate, requests, ledger, now, max_replays).print(out)
        print("dry run: nothing was written (use --apply to replay)", file=out)
        return 0
    grouped = await check_group(config, gate, force=force, out=out)
    if grouped is False:
        return 1
    # The workers' metrics are asked when no member is live on the members topic, and always
    # when the operator named them (--workers, TOOLGATE_WORKERS): both must agree then.
    asked = workers is not None and (grouped is None or workers_named)
    if asked and workers is not None and not check_workers(gate, workers, force=force, out=out):
        return 1
    done = await replayed_accepted(config, now - timedelta(hours=ledger_window_hours))
    skipped = [r for r in records if r in done]
    if skipped:
        print(
            f"skipped {len(skipped)} records: an earlier replay of the same result was accepted "
            "(the audit topic shows it delivered; replaying it again could only be a DUPLICATE_RESULT)",
            file=out,
        )
        records = [r for r in records if r not in done]
    started_ms = int(time.time() * 1000) - 1000
    sent_to: list[str] = []
    sent, refused = await apply(config, records, max_replays, sent_to=sent_to)
    print(
        f"replayed {sent} records to {config.topics.intake}; {refused} refused by the loop guard "
        f"(replayed {max_replays} times already). The worker decides them again: watch "
        f"toolgate_replayed_results_total and the audit topic.",
        file=out,
    )
    if wait_seconds is not None and sent:
        replayed = [r for r in records if r.replays < max_replays]
        followed = await follow(config, replayed, sent_to, started_ms, wait_seconds)
        print(f"\nwhat the worker decided (waited up to {wait_seconds:g} s):", file=out)
        followed.print(replayed, config.topics.quarantine, out)
        return 1 if followed.missing else 0
    return 0
