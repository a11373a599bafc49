"""A gcloud for ``deploy.sh --delete``'s tests: a project's resources kept in a JSON file.

    fake_gcloud.py ARGS...   (installed as ``gcloud`` first on PATH; see the tests)

``$FAKE_GCLOUD_STATE`` is the cloud: ``{"resources": [...], "bindings": [...]}``, where a
resource is ``{"kind": "pubsub topics", "name": ..., "project": ..., "location": ...,
"fields": {...}}`` (kind is gcloud's command group, without ``alpha``/``beta``) and a
binding is ``{"kind": "projects", "resource": ..., "role": ..., "member": ...}``.
It answers what --delete calls: ``describe`` and ``list`` with ``--format=value(...)``
(a dict prints as gcloud prints it, ``k=v;k=v``), ``get-iam-policy`` with the
``--filter`` deploy.sh gives, ``delete`` and ``remove-iam-policy-binding``, which change
the file. A missing resource answers NOT_FOUND, as gcloud does; any other call fails
with status 98. Every call is appended to ``$FAKE_GCLOUD_LOG``, one JSON list a line.

With ``$FAKE_GCLOUD_PUBSUB`` set to the real gcloud, ``gcloud pubsub ...`` runs that
instead (pointed at the Pub/Sub emulator by the caller's environment).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

READ_ONLY = ("describe", "list", "get-iam-policy")
VERBS = (*READ_ONLY, "delete", "remove-iam-policy-binding")
ROLE_FILTER = re.compile(r'bindings\.role="([^"]+)" AND bindings\.members="([^"]+)"')


def parse(args: list[str]) -> tuple[str, str, str, dict[str, str]]:
    """(kind, verb, name, flags) of one call."""
    words = [a for a in args if not a.startswith("--")]
    flags = {}
    for arg in args:
        if arg.startswith("--"):
            key, _, value = arg[2:].partition("=")
            flags[key] = value
    index = next((i for i, word in enumerate(words) if word in VERBS), None)
    if index is None:
        return " ".join(words), "", "", flags
    group = [w for w in words[:index] if w not in ("alpha", "beta")]
    name = words[index + 1] if index + 1 < len(words) else ""
    return " ".join(group), words[index], name, flags


def location(flags: dict[str, str]) -> str:
    return flags.get("region") or flags.get("location") or ""


def shown(value: Any) -> str:
    if isinstance(value, dict):
        return ";".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, bool):
        return str(value)
    return "" if value is None else str(value)


def printed(resource: dict[str, Any], form: str) -> str:
    match = re.fullmatch(r"value\((.*)\)", form)
    assert match, f"fake gcloud: --format={form} is not value(...)"
    fields = {"name": resource["name"], **resource.get("fields", {})}
    return "\t".join(shown(fields.get(key)) for key in match.group(1).split(","))


def fail(message: str, status: int = 1) -> int:
    print(message, file=sys.stderr)
    return status


def main(args: list[str]) -> int:
    with open(os.environ["FAKE_GCLOUD_LOG"], "a") as log:
        log.write(json.dumps(args) + "\n")
    kind, verb, name, flags = parse(args)
    real = os.environ.get("FAKE_GCLOUD_PUBSUB")
    if real and kind.startswith("pubsub"):
        os.execv(real, [real, *args])
    state_path = Path(os.environ["FAKE_GCLOUD_STATE"])
    state = json.loads(state_path.read_text())
    project, where = flags.get("project", ""), location(flags)

    def same(resource: dict[str, Any]) -> bool:
        return (resource["kind"], resource["name"], resource["project"]) == (
            kind,
            name,
            project,
        ) and resource.get("location", "") == where

    found = [r for r in state["resources"] if same(r)]
    if verb == "describe":
        if not found:
            return fail(f"ERROR: (gcloud.{kind}.describe) NOT_FOUND: {name} was not found")
        print(printed(found[0], flags["format"]))
    elif verb == "list":
        for resource in state["resources"]:
            if resource["kind"] == kind and resource["project"] == project:
                print(printed(resource, flags["format"]))
    elif verb == "get-iam-policy":
        wanted = ROLE_FILTER.fullmatch(flags["filter"])
        assert wanted, f"fake gcloud: --filter={flags['filter']} is not deploy.sh's"
        role, member = wanted.groups()
        for binding in state["bindings"]:
            if (binding["kind"], binding["resource"], binding["role"], binding["member"]) == (
                kind,
                name,
                role,
                member,
            ):
                print(role)
    elif verb == "delete":
        if not found:
            return fail(f"ERROR: (gcloud.{kind}.delete) NOT_FOUND: {name} was not found")
        state["resources"].remove(found[0])
        state_path.write_text(json.dumps(state, indent=1))
    elif verb == "remove-iam-policy-binding":
        held = (kind, name, flags["role"], flags["member"])
        kept = [
            b
            for b in state["bindings"]
            if (b["kind"], b["resource"], b["role"], b["member"]) != held
        ]
        if len(kept) == len(state["bindings"]):
            return fail("ERROR: Policy binding with the specified principal, role not found!")
        state["bindings"] = kept
        state_path.write_text(json.dumps(state, indent=1))
    else:
        return fail(f"fake gcloud: unexpected call: {args}", 98)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
