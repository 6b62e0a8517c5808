"""``toolgate contracts``: test, lint, review, diff, history, import-mcp, publish and pull."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from toolgate._config import Config
from toolgate._errors import ConfigError
from toolgate.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    Command,
)


def _tools_argument(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument("tools", nargs="*", metavar="TOOL", help=help_text)


_ONLY = (
    "only these tools' versions (<server>.<tool> for MCP; default: every tool); "
    "the exit status is theirs alone"
)


def _contracts_test_arguments(p: argparse.ArgumentParser) -> None:
    _tools_argument(p, f"run the fixtures of {_ONLY}")
    p.add_argument("-v", "--verbose", action="store_true", help="print passing fixtures too")


def _contracts_lint_arguments(p: argparse.ArgumentParser) -> None:
    _tools_argument(p, f"lint {_ONLY}")


def selected(contracts: Any, tools: list[str]) -> Any:
    """The versions of ``tools`` in ``contracts`` (all of them without ``tools``).

    Raises:
        ConfigError: a tool with no version in the folder, naming it and the folder's tools.
    """
    from toolgate.gate._contracts import ContractSet

    if not tools:
        return contracts
    known = contracts.tools
    missing = [tool for tool in tools if tool not in known]
    if missing:
        shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ConfigError(
            f"{', '.join(repr(t[:130]) for t in missing[:5])}: no such tool in the contracts folder "
            f"(it holds: {shown or 'none'})"
        )
    wanted = set(tools)
    return ContractSet([c for c in contracts if c.spec.tool in wanted], contracts.generation)


def _contracts_diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("old", metavar="OLD", help="the older version folder (or schema file)")
    p.add_argument("new", metavar="NEW", help="the newer version folder (or schema file)")


def _contracts_rebound(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._rebound import rebound

    if args.max_string is None and args.max_items is None:
        raise ConfigError("give --max-string, --max-items or both")
    print(rebound(Path(args.folder), max_string=args.max_string, max_items=args.max_items))
    return EXIT_OK


def _contracts_rebound_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="FOLDER", help="the contract version folder (holding contract.yaml)")
    p.add_argument(
        "--max-string", type=int, metavar="N", help="characters of every string (1..limits.max_bytes)"
    )
    p.add_argument("--max-items", type=int, metavar="N", help="items of every array (1..limits.max_bytes/2)")


def _contracts_import_mcp(args: argparse.Namespace, config: Config) -> int:
    from toolgate.mcp._import import run

    return run(args, config.contracts_dir)


def _contracts_import_mcp_arguments(p: argparse.ArgumentParser) -> None:
    from toolgate.mcp._import import add_arguments

    add_arguments(p)


def _contracts_test(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._fixtures import fixtures_keyring, iter_outcomes, without_fixtures
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._signing import Keyring

    root = config.contracts_dir
    contracts = selected(ContractSet.load(root), args.tools)
    keyring = Keyring.load(args.keyring) if args.keyring else fixtures_keyring(root)
    passed = failed = 0
    for outcome in iter_outcomes(contracts, keyring):
        if outcome.ok:
            passed += 1
            if args.verbose:
                print(f"ok   {outcome.case.name}")
        else:
            failed += 1
            print(f"FAIL {outcome.case.name} ({outcome.case.path}): {outcome.problem}")
    for contract in without_fixtures(contracts):
        failed += 1
        print(
            f"FAIL {contract.key} ({contract.folder}): no fixtures; add at least one "
            "fixtures/accept/*.json or fixtures/reject/*.json"
        )
    print(f"{len(contracts)} contract versions: {passed} passed, {failed} failed")
    return EXIT_PROBLEM if failed else EXIT_OK


def _contracts_lint(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._lint import context_costs, lint_contracts
    from toolgate.gate._contracts import ContractSet

    contracts = selected(ContractSet.load(config.contracts_dir), args.tools)
    findings = lint_contracts(contracts)
    for finding in findings:
        print(f"{finding.file}: {finding.pointer or '/'}: {finding.rule}: {finding.message}")
    for note in context_costs(contracts):
        print(f"note: {note}")
    print(lint_summary(contracts, findings))
    return EXIT_PROBLEM if findings else EXIT_OK


def lint_summary(contracts: Any, findings: list[Any]) -> str:
    """The last line of lint: the findings, those of drafts (which decide nothing until
    reviewed) apart from those of the reviewed versions (active, shadow, disabled, retired)."""
    head = f"{len(contracts)} contract versions: {len(findings)} findings"
    if not findings:
        return head
    drafts = {str(c.path) for c in contracts if c.spec.status == "draft"}
    folders = {str(c.folder) for c in contracts if c.spec.status == "draft"}
    in_drafts = sum(
        f.file in drafts or any(f.file.startswith(folder + "/") for folder in folders) for f in findings
    )
    deciding = len(contracts) - len(drafts)
    return (
        f"{head}: {in_drafts} in {len(drafts)} draft versions (deciding nothing until reviewed: "
        f"toolgate contracts review), {len(findings) - in_drafts} in the {deciding} reviewed versions"
    )


def _review_arguments(p: argparse.ArgumentParser) -> None:
    _tools_argument(p, "the tools whose drafts to review (<server>.<tool>; default: every draft)")
    p.add_argument(
        "--accept-text",
        action="append",
        default=[],
        metavar="POINTER=REASON",
        help="accept the text or projected string at POINTER, or every one under it, as shown; a "
        "projected string's reason (10 characters at least) is written under free_text (repeatable)",
    )
    p.add_argument(
        "--rewrite",
        action="append",
        default=[],
        metavar="POINTER=TEXT",
        help="replace a title, description or $comment the host's model reads (repeatable)",
    )
    p.add_argument(
        "--cut",
        action="append",
        default=[],
        metavar="POINTER",
        help="take out a title, description, $comment, default or examples, or a projected field "
        "(repeatable)",
    )
    p.add_argument(
        "--bound",
        action="append",
        default=[],
        metavar="POINTER=N",
        help="set a bound: $.mcp.text_max_length=N, the characters of the upstream's own text "
        "passed to the user; or a projected string's or array's own bound, /data/FIELD=N "
        "characters or items, written in the closure of schema.json, at most what limits.max_bytes "
        "holds (repeatable)",
    )
    p.add_argument(
        "--activate",
        action="store_true",
        help="set status: active when every item was shown and decided and lint finds nothing",
    )
    p.add_argument(
        "--samples",
        metavar="FILE",
        help="results of the tools (JSON Lines of CallToolResult, or {tool, result}): sample values "
        "shown beside each projected field",
    )
    p.add_argument(
        "--sample",
        action="append",
        default=[],
        metavar="TOOL=ARGUMENTS",
        help="call TOOL (<server>.<tool>) for real with ARGUMENTS (a JSON object) on the server of "
        "--command or --url, and show its values beside the projected fields (repeatable, at most 20; "
        "a call does what the tool does)",
    )
    server = p.add_mutually_exclusive_group()
    server.add_argument("--command", dest="server_command", metavar="CMD", help="--sample: start the server")
    server.add_argument("--url", metavar="URL", help="--sample: the server's streamable HTTP URL (loopback)")
    p.add_argument("--timeout", type=float, default=30.0, metavar="S", help="--sample: seconds per call (30)")
    p.add_argument("--no-input", action="store_true", help="never ask on a terminal")


def _contracts_review(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring import _review as review
    from toolgate.authoring._lint import lint_contracts
    from toolgate.gate._contracts import ContractSet

    contracts = selected(ContractSet.load(config.contracts_dir), args.tools)
    drafts = [c for c in contracts if c.spec.status == "draft"]
    for tool in args.tools:
        if not any(c.spec.tool == tool for c in drafts):
            print(f"{tool}: no draft to review (its versions: {_statuses(contracts, tool)})")
    if not args.tools and not drafts:
        print(f"{config.contracts_dir}: no draft to review ({len(contracts)} contract versions)")
    decisions = review.parse_decisions(args.accept_text, args.rewrite, args.cut, args.bound)

    def lint(contract: Any) -> list[Any]:
        return lint_contracts(ContractSet([contract]))

    tools = sorted({c.spec.tool for c in drafts})
    samples = review.read_samples(Path(args.samples), tools) if args.samples else {}
    if args.sample:
        samples = _called(args, tools, samples)
    screens = [review.screen(c, lint(c), samples.get(c.spec.tool)) for c in drafts]
    planned = []
    unused: set[int] = set(range(len(decisions)))
    for view in screens:
        chosen, _ = review.decide(view, decisions) if not view.refused else ([], [])
        unused -= {decisions.index(d) for _, d in chosen}
        planned.append(chosen)
    if screens and unused and not any(view.refused for view in screens):  # a refused one decides nothing
        first = decisions[min(unused)]
        raise ConfigError(
            f"{first.flag} {first.pointer}: no item of {', '.join(tools)} at or under it to take it "
            "(the pointers are those the review shows)"
        )
    asking = (
        not decisions
        and not args.activate
        and not args.no_input
        and sys.stdin.isatty()
        and sys.stdout.isatty()
    )
    problem = False
    for view, chosen in zip(screens, planned, strict=True):
        for line in review.render(view):
            print(line)
        activate = args.activate
        if asking and not view.refused:
            chosen, _ = review.decide(view, review.ask_decisions(view, input, print))
            activate = input(f"activate {view.contract.spec.tool} (status: active)? [y/N] > ").strip() == "y"
        outcome = review.apply(view, chosen, activate=activate, lint=lint)
        problem |= _said(view, outcome, activate)
    return EXIT_PROBLEM if problem else EXIT_OK


def _called(args: argparse.Namespace, tools: list[str], samples: dict[str, Any]) -> dict[str, Any]:
    """``samples`` with the results of the ``--sample`` calls."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ConfigError("--sample needs the MCP SDK: pip install 'toolgate[mcp]'") from None
    from toolgate.mcp._samples import call_samples, parse_sample

    if not 0 < args.timeout <= 3600:
        raise ConfigError(f"--timeout: must be in 0..3600 seconds (got {args.timeout})")
    calls = [parse_sample(given, tools) for given in args.sample]
    called = call_samples(calls, command=args.server_command, url=args.url, timeout_s=args.timeout)
    return {tool: [*samples.get(tool, []), *called.get(tool, [])] for tool in tools}


def _statuses(contracts: Any, tool: str) -> str:
    return ", ".join(f"{c.key.split('@')[-1]} {c.spec.status}" for c in contracts.versions(tool))


def _said(view: Any, outcome: Any, activate: bool) -> bool:
    """The lines after a screen: what was decided and written; True when something is left."""
    tool = view.contract.spec.tool

    def where(item: Any) -> str:
        return f"{item.file} {item.pointer}" if item.file.endswith(".json") else str(item.pointer)

    for item, decision in outcome.decided:  # the review's record, for the log of a script or CI
        value = f": {json.dumps(decision.value)}" if decision.value else ""
        print(f"{tool}: {decision.action} {where(item)}{value}")
    for path in outcome.written:
        print(f"{tool}: written {path}")
    left = [where(i) for i in outcome.undecided]
    verdict = (
        "activated (status: active)"
        if outcome.activated
        else "not activated"
        if activate
        else "left a draft (--activate sets status: active)"
    )
    decided = len({id(item) for item, _ in outcome.decided})  # a field's bound beside its accept
    print(f"{tool}: {decided} items decided, {len(left)} not: {verdict}")
    if left:
        print(f"{tool}: not decided: {', '.join(left)}")
    for line in outcome.blocking:
        print(f"{tool}: held: {line}")
    return bool(view.refused or left or (activate and not outcome.activated))


def _contracts_diff(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._contract_diff import diff_contracts
    from toolgate.authoring._schema_diff import diff_schemas
    from toolgate.gate._contracts import load_contract

    old, new = Path(args.old), Path(args.new)
    if old.is_dir() and new.is_dir():
        changes = diff_contracts(load_contract(old), load_contract(new))
    elif old.is_file() and new.is_file():
        changes = diff_schemas(_read_schema(old), _read_schema(new))
    else:
        raise ConfigError(f"{old} and {new}: give two contract version folders or two schema files")
    for change in changes:
        label = "BREAKING" if change.breaking else "widens  " if change.widens else "change  "
        print(f"{label} {change.pointer or '/'}: {change.kind}: {change.message}")
    breaking = sum(c.breaking for c in changes)
    widening = sum(c.widens and not c.breaking for c in changes)
    print(
        f"{len(changes)} changes, {breaking} breaking, {widening} widening what reaches the agent "
        "(review them)"
    )
    return EXIT_PROBLEM if breaking else EXIT_OK


def _contracts_history(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._contract_diff import contract_history
    from toolgate.gate._contracts import ContractSet

    steps = contract_history(ContractSet.load(config.contracts_dir))
    for step in steps:
        breaking = sum(c.breaking for c in step.changes)
        verdict = "ok" if step.ok else "FAIL: breaking change without a new major version"
        print(f"{step.old} -> {step.new}: {len(step.changes)} changes, {breaking} breaking: {verdict}")
        for change in step.changes:
            label = "BREAKING" if change.breaking else "widens  " if change.widens else "change  "
            print(f"    {label} {change.pointer or '/'}: {change.kind}")
    failed = sum(not step.ok for step in steps)
    print(f"{len(steps)} version steps, {failed} failed")
    return EXIT_PROBLEM if failed else EXIT_OK


def _registry_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--registry",
        metavar="URL",
        help="the registry's Confluent-compatible API, e.g. http://127.0.0.1:18081/apis/ccompat/v7 "
        "(TOOLGATE_REGISTRY_URL)",
    )


def _publish_arguments(p: argparse.ArgumentParser) -> None:
    _registry_arguments(p)
    p.add_argument(
        "--to",
        choices=("registry", "topic", "both"),
        default="registry",
        help="where to publish: the schema registry (default), the contracts topic "
        "(TOOLGATE_TOPIC_CONTRACTS, read by workers started with --contracts kafka:), or both",
    )
    p.add_argument(
        "--publisher-key",
        metavar="ID",
        required=True,
        help="the keyring's [publishers.ID] key (with its private key) that signs every version and "
        "the set marker; readers load only what a publisher their keyring names signed",
    )
    p.add_argument(
        "--generation",
        metavar="N",
        type=int,
        help="the set marker's generation (default: the registry's newest plus 1; on the topic, one above "
        "its highest verified marker and every live member's); after a registry lost its contents, one "
        "above the readers' (they never go back to an older generation)",
    )


def _pull_arguments(p: argparse.ArgumentParser) -> None:
    _registry_arguments(p)
    p.add_argument("dest", metavar="DIR", help="the folder to write the versions into (created when missing)")


def _registry_client(args: argparse.Namespace, config: Config) -> Any:
    from toolgate.registry._client import parse_source
    from toolgate.registry._connect import client_of

    url = args.registry or config.registry.url
    setting = "--registry" if args.registry else "TOOLGATE_REGISTRY_URL"
    if not url:
        raise ConfigError("no schema registry: give --registry URL or set TOOLGATE_REGISTRY_URL")
    plain = url[len("registry+") :] if url.startswith("registry+") else url
    return client_of(parse_source("registry+" + plain, setting=setting), config)


def _contracts_publish(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._publish import publish
    from toolgate.gate._contracts import ContractSet
    from toolgate.gate._signing import Keyring

    if not config.keyring:
        raise ConfigError(
            f"--publisher-key {args.publisher_key}: give --keyring FILE (or TOOLGATE_KEYRING) holding "
            f"[publishers.{args.publisher_key}] with its private key"
        )
    key = Keyring.load(config.keyring).publisher(args.publisher_key)
    if key is None:
        raise ConfigError(
            f"--publisher-key {args.publisher_key}: the keyring {config.keyring} has no "
            f"[publishers.{args.publisher_key}]"
        )
    contracts = ContractSet.load(config.contracts_dir)  # fails before any request
    if args.to in ("topic", "both"):
        _publish_to_topic(contracts, key, args, config)
        if args.to == "topic":
            return EXIT_OK
    client = _registry_client(args, config)
    done = publish(contracts, client, key, set_name=config.registry.set_name, generation=args.generation)
    for item in done:
        at = f" (schema id {item.schema_id})" if item.schema_id is not None else ""
        print(f"{item.key}: {item.action} under {item.subject}{at}")
    versions = [item for item in done if item.action != "set"]
    registered = sum(item.action != "unchanged" for item in versions)
    marker = next((item.key for item in done if item.action == "set"), None)
    tail = f"; set {marker} written last" if marker else "; the set is unchanged"
    unchanged = len(versions) - registered
    print(f"{len(versions)} contract versions: {registered} registered, {unchanged} unchanged{tail}")
    return EXIT_OK


def _publish_to_topic(contracts: Any, key: Any, args: argparse.Namespace, config: Config) -> None:
    from toolgate.authoring._publish import signed_versions
    from toolgate.gate._signing import Keyring
    from toolgate.operations._publish_topic import publish_to_topic

    versions = list(signed_versions(contracts, key).values())
    keyring = Keyring.load(config.keyring) if config.keyring else None
    done = asyncio.run(publish_to_topic(config, versions, key, generation=args.generation, keyring=keyring))
    for name in done.written:
        print(f"{name}: written to {config.topics.contracts}")
    print(
        f"{len(versions)} contract versions: {len(done.written)} written, {len(done.unchanged)} unchanged; "
        f"set generation {done.generation} written last to {config.topics.contracts}"
    )
    if not done.members:
        print(
            f"no live member of group {config.group_id} on {config.topics.members}: none confirmed it "
            f"trusts publisher {key.key_id} (toolgate contracts status shows what each loads)"
        )


def _status_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--group", metavar="ID", help="the consumer group to show (default TOOLGATE_GROUP_ID)")


def _contracts_status(args: argparse.Namespace, config: Config) -> int:
    from datetime import UTC, datetime

    from toolgate.service._kafka import AiokafkaClients
    from toolgate.service._members import disagreeing, live_members, read_members

    group = args.group or config.group_id
    now = datetime.now(UTC)
    members = live_members(asyncio.run(read_members(config, AiokafkaClients(config))), group, now)
    if not members:
        print(f"group {group}: no live member on {config.topics.members}")
        return EXIT_PROBLEM
    sets = sorted({m.label for m in members})
    split = disagreeing(members)
    refusing = [m for m in members if m.refused]
    verdict = f"{len(sets)} contract sets: THEY DISAGREE" if split else f"one contract set, {sets[0]}"
    if refusing:
        verdict += f"; {len(refusing)} REFUSE the newest set on their source"
    print(f"group {group}: {len(members)} live members, {verdict}")
    for m in members:
        age = max(0.0, (now - m.at).total_seconds())
        print(
            f"  {m.member}  {m.label}  generation {m.generation}  {len(m.tools)} tools "
            f"({', '.join(m.tools)})  heard {age:.0f} s ago"
        )
        if m.refused:
            print(f"    refuses: {m.refused}")
    return EXIT_PROBLEM if split or refusing else EXIT_OK


def _contracts_pull(args: argparse.Namespace, config: Config) -> int:
    from toolgate.authoring._publish import pull
    from toolgate.registry._connect import publishers_keyring
    from toolgate.registry._snapshot import Problem

    keyring = publishers_keyring(config, "toolgate contracts pull")
    client = _registry_client(args, config)
    dest = Path(args.dest)
    problems: list[Problem] = []
    try:
        generation, written = pull(
            client, dest, keyring, set_name=config.registry.set_name, problems=problems
        )
    finally:
        for problem in problems:
            print(f"toolgate: {problem.message}", file=sys.stderr)
    for key in written:
        print(f"{key}: written")
    print(f"{len(written)} contract versions of set generation {generation} written into {dest}")
    return EXIT_OK


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except ValueError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(schema, dict):
        raise ConfigError(f"{path}: a schema must be a JSON object")
    return schema


COMMANDS: tuple[Command, ...] = (
    Command(
        ("contracts",),
        "test, lint and diff contracts",
        "Keep contracts honest: fixtures, rules, changes.",
        (
            "toolgate contracts test",
            "toolgate contracts diff contracts/deploy_status/v1 contracts/deploy_status/v2",
        ),
    ),
    Command(
        ("contracts", "test"),
        "run every fixture; each reject must hit its stage and code",
        "Run every fixture of every contract version through the real gate: an accept\n"
        "fixture must be accepted, a reject fixture must end at the stage and code it\n"
        "names (and, for RULE_FAILED, the cel rule its expect.rule names). Exit 1 when\n"
        "any fixture fails. Given TOOLs, only their versions' fixtures run.",
        (
            "toolgate contracts test",
            "toolgate contracts test --contracts ./contracts -v",
            "toolgate contracts test --contracts demo memory.read_graph",
        ),
        _contracts_test,
        ("contracts", "keyring"),
        _contracts_test_arguments,
    ),
    Command(
        ("contracts", "lint"),
        "closed objects, bounded strings and arrays, no free maps",
        "Hold every contract schema to the schema rules (docs/design.md, Contracts):\n"
        "closed objects, bounded strings and arrays, no free-form maps, anchored\n"
        "patterns, format only where asserted. Exit 1 on any finding. Given TOOLs, only\n"
        "their versions are linted. The last line counts the findings of drafts apart.",
        (
            "toolgate contracts lint",
            "toolgate contracts lint --contracts ./contracts",
            "toolgate contracts lint --contracts demo memory.read_graph",
        ),
        _contracts_lint,
        ("contracts",),
        _contracts_lint_arguments,
    ),
    Command(
        ("contracts", "review"),
        "show each draft's texts, projection and findings; decide them, then activate",
        "One screen per draft version (of the TOOLs named, or every draft): each text the\n"
        "host's model reads (the definition's title and description, every text of the input\n"
        "schema the proxy serves), each projected field with its bound (and sample values\n"
        "from --sample calls or a --samples file), the text bound, and every other lint\n"
        "finding, each with the decision it asks. On a terminal without decision flags, each\n"
        "is asked in turn (accept with a reason, rewrite, cut, bound, skip). Flags decide the\n"
        "same for scripts: a POINTER names an item as the screen shows it, or a place holding\n"
        "several ($.mcp.definition, /allOf/0, /data). The edit is the one a careful hand edit\n"
        "makes (status, free_text entries, projection lines, texts rewritten or cut where\n"
        "they stand, a projected string's or array's own bound in the closure of schema.json,\n"
        "up to what limits.max_bytes holds). --activate sets status: active only when every\n"
        "item was shown and decided and lint then finds nothing; a version too large to show\n"
        "whole (over 2000 items or 400000 characters) is refused, never shown in part. Exit 1\n"
        "while anything is left.",
        (
            "toolgate contracts review --contracts demo memory.read_graph",
            "toolgate contracts review --contracts demo memory.read_graph --accept-text "
            "'$.mcp=read: plain words for the tool' --accept-text '/data=the graph as stored, read "
            "as data' --activate",
            "toolgate contracts review --contracts demo memory.delete_entities --bound "
            "/data/message=6000 --accept-text '/data=the message as written, read as data'",
        ),
        _contracts_review,
        ("contracts",),
        _review_arguments,
    ),
    Command(
        ("contracts", "diff"),
        "class each change between two versions as breaking or not",
        "Compare two contract versions (folders holding contract.yaml) or two schema\n"
        "files. Exit 1 when a change is breaking.",
        (
            "toolgate contracts diff contracts/deploy_status/v1 contracts/deploy_status/v2",
            "toolgate contracts diff old/schema.json new/schema.json",
        ),
        _contracts_diff,
        (),
        _contracts_diff_arguments,
    ),
    Command(
        ("contracts", "history"),
        "diff every version with its predecessor; breaking needs a new major",
        "For every tool, diff each version (v1, v1.1, v2, ...) with its predecessor.\n"
        "Exit 1 when a breaking change comes without a new major version (v1 -> v1.1).",
        ("toolgate contracts history",),
        _contracts_history,
        ("contracts",),
    ),
    Command(
        ("contracts", "rebound"),
        "set the string and array bounds of an imported contract's closure",
        "Derive an imported contract version's closure again with the bounds a tool needs\n"
        "(every string at most --max-string characters, every array at most --max-items\n"
        "items, each up to what limits.max_bytes holds) and write its schema.json back; the\n"
        "projection and the review stay. The agent envelope follows the bounds. A quarantined\n"
        "result over a bound names it.",
        (
            "toolgate contracts rebound contracts/filesystem.read_text_file/v1 --max-string 8000",
            "toolgate contracts rebound contracts/memory.read_graph/v1 --max-items 500",
        ),
        _contracts_rebound,
        (),
        _contracts_rebound_arguments,
    ),
    Command(
        ("contracts", "import-mcp"),
        "draft contract versions from an MCP server's tools (closed, text-only)",
        "Write a draft contract version per tool of an MCP server, whole or not at all, into\n"
        "the contracts folder (created when missing; its parent must exist). A\n"
        "tool with an outputSchema: the schema is allOf [outputSchema, closure], the closure\n"
        "rejecting undeclared members and bounding strings and arrays everywhere, so it\n"
        "accepts only what the outputSchema accepts; a shape that cannot be closed soundly\n"
        "is refused. A tool without one: a text-only contract (no data, its text as bounded\n"
        "untrusted_text). Then a projection of every scalar field and fixtures, and the\n"
        "pinned definition (mcp.definition: title, description, annotations, the digest of\n"
        "the tool as listed; input.schema.json: its inputSchema closed the same way). A\n"
        "draft never decides: review it (lint lists every upstream text the host's model\n"
        "reads as unreviewed-text), settle `toolgate contracts lint`, set status: active\n"
        "(docs/mcp.md, Quick start, says what to settle). Nothing is written before every\n"
        "tool is listed and closed or refused.\n"
        "A version is never overwritten: a tool whose live definition differs from the\n"
        "pinned one is written as the next minor (or, when breaking, major) draft and the\n"
        "diff printed (each changed text shown around what changed), the review of the\n"
        "version before carried over for what did not change (free_text, rules, signature,\n"
        "cuts from the projection, hand-written fixtures; a note names what was not);\n"
        "one listed as pinned is `unchanged`. Refused tools print one line\n"
        "each. Exit 1 while drafts are left to\n"
        "review or a tool was refused, 2 when the listing cannot be read. --url must be on\n"
        "the loopback.",
        (
            'toolgate contracts import-mcp --server deployer --command "python -m deployer_mcp"',
            "toolgate contracts import-mcp --server deployer --url http://127.0.0.1:8000/mcp",
            "toolgate contracts import-mcp --server deployer --tools-list tools.json --tool deploy_status",
        ),
        _contracts_import_mcp,
        ("contracts",),
        _contracts_import_mcp_arguments,
    ),
    Command(
        ("contracts", "publish"),
        "publish every contract version, signed, to a schema registry or the contracts topic",
        "Register each contract version the registry lacks as a JSON Schema under the\n"
        "subject <tool>-v<major>-value, its folder's files signed with the publisher key\n"
        "beside it, each subject's compatibility BACKWARD (a revision accepts what its\n"
        "predecessor accepted; a new major version is a new subject), and status changes;\n"
        "then, LAST, the signed set marker (<set>-set-value, generation + 1): readers load\n"
        "a set only when complete by it, and only from a publisher their keyring names.\n"
        "A breaking revision is refused before any request, as the registry refuses it;\n"
        "a registered version never changes (docs/contracts.md, Schema registry).\n"
        "--to topic writes each signed version to the contracts topic (key\n"
        "version/<tool>/<version>), then the set marker (key set) last; workers and\n"
        "proxies started with --contracts kafka: load it once complete. A version whose\n"
        "record on the topic is not exactly this publish's (signature included) is\n"
        "written again; the generation is above the topic's highest verified marker and\n"
        "every live member's (TOOLGATE_TOPIC_MEMBERS); a key a live member's keyring does\n"
        "not trust is refused before anything is written (exit 2).",
        (
            "toolgate contracts publish --registry http://127.0.0.1:18081/apis/ccompat/v7 "
            "--keyring contracts/fixtures-keyring.toml --publisher-key sample-publisher",
            "toolgate contracts publish --to topic --bootstrap 127.0.0.1:19092 "
            "--keyring contracts/fixtures-keyring.toml --publisher-key sample-publisher",
            "TOOLGATE_REGISTRY_URL=https://registry.example/apis/ccompat/v7 TOOLGATE_KEYRING=publisher.toml "
            "toolgate contracts publish --publisher-key contracts-team-2026",
        ),
        _contracts_publish,
        ("contracts", "keyring", "bootstrap"),
        _publish_arguments,
    ),
    Command(
        ("contracts", "status"),
        "list each live worker of the group and the contract set it decides with",
        "Read the members topic (TOOLGATE_TOPIC_MEMBERS) to its end and list every live\n"
        "worker of the group (heard from within three TOOLGATE_MEMBERS_REFRESH_SECONDS)\n"
        "with the contract set it decides with: its label g<generation>-<digest>, the\n"
        "tg-contract-set header of its decisions, and its tools, and what a worker's\n"
        "source refuses of the newest set there (a marker or version that does not verify\n"
        "against its keyring, a set it cannot complete). Exit 1 when the workers disagree\n"
        "(more than one set), one refuses the newest set, or none is live; 0 otherwise.",
        (
            "toolgate contracts status",
            "toolgate contracts status --group toolgate --bootstrap kafka:9092",
        ),
        _contracts_status,
        ("bootstrap",),
        _status_arguments,
    ),
    Command(
        ("contracts", "pull"),
        "write a schema registry's contract versions into a folder",
        "Write the versions of the registry's newest complete set into DIR as\n"
        "<tool>/v<N>/ (contract.yaml, schemas, fixtures), exactly as their publisher\n"
        "signed them, for review, lint and fixtures. The keyring (--keyring,\n"
        "TOOLGATE_KEYRING) names the publishers trusted; a registration refused or ignored\n"
        "is said on one line each.",
        (
            "toolgate contracts pull --registry http://127.0.0.1:18081/apis/ccompat/v7 "
            "--keyring contracts/fixtures-keyring.toml pulled",
        ),
        _contracts_pull,
        ("keyring",),
        _pull_arguments,
    ),
)
