"""IAM's evaluation of identity policies, for LocalAws (see local_aws.py's docstring).

moto stores IAM users, roles, groups and their policies, but evaluates none of them unless
a process-wide setting turns access control on for every account. This module evaluates
them where dynagent's checks need it, for LocalAws's own accounts only:

* ``SimulatePrincipalPolicy`` (moto has none): the identity policies of a role, user or
  group (inline and attached managed ones, and a user's groups'), evaluated for each
  action and resource asked, with the ``ContextEntries`` given. Decisions are IAM's:
  an explicit Deny wins, then an Allow, else ``implicitDeny``; ``MatchedStatements`` and
  ``MissingContextValues`` as IAM reports them. Simpler than IAM: no permissions
  boundaries, SCPs, session or resource policies, no policy variables (``${aws:username}``),
  no paging (every result in one answer); condition operators are the String, Arn,
  Bool and Null families with ``ForAllValues:``/``ForAnyValue:`` and ``IfExists``, and
  any other operator is refused (an error, never a silent match).
* ``iam:PassRole`` on EC2 launches with ``DryRun`` (moto answers DryRunOperation for
  anyone): the caller, found by the access key that signed the request, must be allowed
  ``iam:PassRole`` on the instance profile's role with ``iam:PassedToService`` =
  ``ec2.amazonaws.com``, else EC2's ``UnauthorizedOperation`` naming the action and
  role, as EC2's message does (with HTTP 400, where EC2 sends 403: boto3 retries
  neither). A key that belongs to no IAM user of the
  account is the account's root, allowed everything. Only PassRole is judged: the
  caller's ``ec2:*`` permissions are not.
* ``CreateServiceLinkedRole`` names EC2's roles as AWS does (``spot.amazonaws.com`` ->
  ``AWSServiceRoleForEC2Spot``; moto makes ``AWSServiceRoleForspot``).

moto keeps the inline policies of roles made by CloudFormation as Python ``repr`` text
rather than JSON; documents are read either way.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.iam.exceptions import NotFoundException
from moto.iam.models import IAMBackend, iam_backends
from moto.iam.responses import IamResponse

PARTITION: Final = "aws"
ALLOWED: Final = "allowed"
EXPLICIT_DENY: Final = "explicitDeny"
IMPLICIT_DENY: Final = "implicitDeny"
# AWS's names for the EC2 service-linked roles; moto derives others from the service.
SERVICE_LINKED_ROLES: Final = {
    "spot.amazonaws.com": "AWSServiceRoleForEC2Spot",
    "spotfleet.amazonaws.com": "AWSServiceRoleForEC2SpotFleet",
    "ec2fleet.amazonaws.com": "AWSServiceRoleForEC2Fleet",
}


class PolicyError(ServiceException):
    """A policy uses what this evaluator does not model: answered as IAM's InvalidInput."""

    code = "InvalidInput"


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------

Context = Mapping[str, list[str]]  # condition key (lower case) -> values


@dataclass(frozen=True)
class Document:
    """One policy document and where it comes from, as SimulatePrincipalPolicy names it."""

    source_id: str
    source_type: str  # "role", "user", "group", "user-managed"
    statements: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Decision:
    decision: str
    matched: tuple[tuple[str, str], ...] = ()  # (source id, source type)
    missing: tuple[str, ...] = ()


def evaluate(
    documents: Iterable[Document], action: str, resource: str, context: Context
) -> Decision:
    """IAM's answer for one request: a matching Deny wins, then an Allow."""
    allows: list[tuple[str, str]] = []
    denies: list[tuple[str, str]] = []
    missing: set[str] = set()
    for document in documents:
        for statement in document.statements:
            if not _applies(statement, action, resource):
                continue
            missing.update(_missing_keys(statement, context))
            if not _conditions_hold(statement.get("Condition") or {}, context):
                continue
            found = denies if statement.get("Effect") == "Deny" else allows
            found.append((document.source_id, document.source_type))
    if denies:
        return Decision(EXPLICIT_DENY, tuple(denies), tuple(sorted(missing)))
    if allows:
        return Decision(ALLOWED, tuple(allows), tuple(sorted(missing)))
    return Decision(IMPLICIT_DENY, (), tuple(sorted(missing)))


def _applies(statement: Mapping[str, Any], action: str, resource: str) -> bool:
    actions = statement.get("Action")
    if actions is not None:
        matched = any(_wildcard(a, fold=True).fullmatch(action) for a in _listed(actions))
    else:
        matched = not any(
            _wildcard(a, fold=True).fullmatch(action) for a in _listed(statement["NotAction"])
        )
    if not matched:
        return False
    resources = statement.get("Resource")
    if resources is not None:
        return any(_wildcard(r).fullmatch(resource) for r in _listed(resources))
    return not any(_wildcard(r).fullmatch(resource) for r in _listed(statement["NotResource"]))


def _listed(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


@cache
def _wildcard(pattern: str, fold: bool = False) -> re.Pattern[str]:
    """IAM's ``*`` (any run) and ``?`` (one character); actions ignore case."""
    text = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(text, re.IGNORECASE if fold else 0)


def _missing_keys(statement: Mapping[str, Any], context: Context) -> set[str]:
    keys = {key for block in (statement.get("Condition") or {}).values() for key in block}
    return {key for key in keys if key.lower() not in context}


def _conditions_hold(conditions: Mapping[str, Mapping[str, Any]], context: Context) -> bool:
    return all(
        _condition(operator, key, _listed(expected), context.get(key.lower()))
        for operator, block in conditions.items()
        for key, expected in block.items()
    )


def _condition(operator: str, key: str, expected: list[str], given: list[str] | None) -> bool:
    qualifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    if name == "Null":
        return (given is None) == (expected[0].lower() == "true")
    test = _OPERATORS.get(name)
    if test is None or qualifier not in ("", "ForAllValues", "ForAnyValue"):
        raise PolicyError(f"condition operator {operator!r} is not modelled by the local AWS")
    if given is None:
        # A missing key: ForAllValues holds vacuously, IfExists holds, others fail.
        return qualifier == "ForAllValues" or if_exists
    negated = name.startswith(("StringNot", "ArnNot"))
    hits = [any(test(value, wanted) for wanted in expected) for value in given]
    if qualifier == "ForAllValues":
        return all(h != negated for h in hits)
    found = any(hits)
    return not found if negated else found


def _string_like(value: str, pattern: str) -> bool:
    return bool(_wildcard(pattern).fullmatch(value))


_OPERATORS: Final[dict[str, Callable[[str, str], bool]]] = {
    "StringEquals": str.__eq__,
    "StringNotEquals": str.__eq__,
    "StringEqualsIgnoreCase": lambda v, w: v.lower() == w.lower(),
    "StringLike": _string_like,
    "StringNotLike": _string_like,
    "ArnEquals": _string_like,
    "ArnLike": _string_like,
    "ArnNotEquals": _string_like,
    "ArnNotLike": _string_like,
    "Bool": lambda v, w: v.lower() == w.lower(),
}


# --------------------------------------------------------------------------------------
# Principals and their documents, read from moto's IAM backend
# --------------------------------------------------------------------------------------


def parse_document(text: Any) -> tuple[dict[str, Any], ...]:
    """A policy's statements, from JSON text, moto's repr of a dict, or a dict."""
    if isinstance(text, str):
        try:
            document = json.loads(text)
        except ValueError:
            document = ast.literal_eval(text)
    else:
        document = text
    statements = document.get("Statement", [])
    return tuple(statements if isinstance(statements, list) else [statements])


def _documents_of(holder: Any, kind: str) -> list[Document]:
    """Inline and attached managed policies of a role, user or group."""
    found = [Document(name, kind, parse_document(text)) for name, text in holder.policies.items()]
    for policy in holder.managed_policies.values():
        version = next(v for v in policy.versions if v.is_default)
        found.append(Document(policy.arn, "user-managed", parse_document(version.document)))
    return found


def principal_documents(backend: IAMBackend, arn: str) -> list[Document]:
    """Every identity policy of the role, user or group ``arn``."""
    kind, _, path_name = arn.split(":", 5)[-1].partition("/")
    name = path_name.rsplit("/", 1)[-1]
    if kind == "role":
        return _documents_of(backend.get_role_by_arn(arn), "role")
    if kind == "group":
        return _documents_of(backend.get_group(name), "group")
    if kind == "user":
        documents = _documents_of(backend.get_user(name), "user")
        for group in backend.get_groups_for_user(name):
            documents += _documents_of(group, "group")
        return documents
    raise NotFoundException(f"PolicySourceArn {arn} is not a role, user or group")


def caller_arn(backend: IAMBackend, access_key_id: str) -> str | None:
    """The IAM user whose key signed a request; None for any other key (the root)."""
    for user in backend.users.values():
        if any(key.access_key_id == access_key_id for key in user.access_keys):
            return str(user.arn)
    return None


# --------------------------------------------------------------------------------------
# The wire: SimulatePrincipalPolicy, PassRole on dry runs, service-linked role names
# --------------------------------------------------------------------------------------


def _context(entries: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {
        str(entry["ContextKeyName"]).lower(): [str(v) for v in entry.get("ContextKeyValues", [])]
        for entry in entries
    }


def _simulate_principal_policy(self: Any) -> ActionResult:
    documents = principal_documents(self.backend, self._get_param("PolicySourceArn"))
    context = _context(self._get_param("ContextEntries", []))
    results = []
    for action in self._get_param("ActionNames", []):
        for resource in self._get_param("ResourceArns", []) or ["*"]:
            decision = evaluate(documents, action, resource, context)
            results.append(
                {
                    "EvalActionName": action,
                    "EvalResourceName": resource,
                    "EvalDecision": decision.decision,
                    "MatchedStatements": [
                        {"SourcePolicyId": source, "SourcePolicyType": kind}
                        for source, kind in decision.matched
                    ],
                    "MissingContextValues": list(decision.missing),
                }
            )
    return ActionResult({"EvaluationResults": results, "IsTruncated": False})


class UnauthorizedOperation(EC2ClientError):
    def __init__(self, caller: str, action: str, resource: str) -> None:
        super().__init__(
            "UnauthorizedOperation",
            f"You are not authorized to perform this operation. User: {caller} is not "
            f"authorized to perform: {action} on resource: {resource} because no "
            f"identity-based policy allows the {action} action",
        )


def refuse_pass_role(response: Any, profile_arn: str | None, profile_name: str | None) -> None:
    """On a dry run with an instance profile: EC2's answer when the caller may not pass
    the profile's role to EC2 (see the module docstring)."""
    if not (profile_arn or profile_name):
        return
    backend = iam_backends[response.current_account][PARTITION]
    caller = caller_arn(backend, response.get_access_key())
    if caller is None:
        return
    if profile_arn:
        profile = backend.get_instance_profile_by_arn(profile_arn)
    else:
        profile = backend.get_instance_profile(str(profile_name))
    documents = principal_documents(backend, caller)
    context = {"iam:passedtoservice": ["ec2.amazonaws.com"]}
    for role in profile.roles:
        if evaluate(documents, "iam:PassRole", role.arn, context).decision != ALLOWED:
            raise UnauthorizedOperation(caller, "iam:PassRole", role.arn)


def _service_linked_role_names(
    original: Callable[..., Any], owned: Callable[[str], bool]
) -> Callable[..., Any]:
    def create(self: Any, service_name: str, description: str, suffix: str) -> Any:
        name = SERVICE_LINKED_ROLES.get(service_name)
        if name is None or not owned(self.account_id):
            return original(self, service_name, description, suffix)
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Action": ["sts:AssumeRole"],
                    "Effect": "Allow",
                    "Principal": {"Service": [service_name]},
                }
            ],
        }
        return self.create_role(
            name + (f"_{suffix}" if suffix else ""),
            json.dumps(trust),
            f"/aws-service-role/{service_name}/",
            permissions_boundary=None,
            description=description,
            tags=[],
            max_session_duration="3600",
            linked_service=service_name,
        )

    return create


def patches(owned: Callable[[str], bool]) -> tuple[tuple[type, str, object], ...]:
    """(owner, attribute, replacement) for moto_patches.py to install while a LocalAws runs;
    ``owned`` says whether an account is a LocalAws's."""

    def simulate(self: Any) -> ActionResult:
        if not owned(self.current_account):
            raise NotImplementedError("SimulatePrincipalPolicy is LocalAws's only")
        return _simulate_principal_policy(self)

    original = IAMBackend.create_service_linked_role
    return (
        (IamResponse, "simulate_principal_policy", simulate),
        (IAMBackend, "create_service_linked_role", _service_linked_role_names(original, owned)),
    )
