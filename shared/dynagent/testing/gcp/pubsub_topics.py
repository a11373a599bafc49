"""A local Pub/Sub topics API, for the one thing the emulator cannot do: topic labels.

The gcloud Pub/Sub emulator refuses ``UpdateTopic`` with ``labels`` in its mask ("labels
is not a known Topic field"), and the status summaries live in the snapshot topic's
labels (``dynagent.gcp.status``). ``LocalPubSubTopics`` serves ``topics.create``
(PUT), ``get`` and ``patch`` of Pub/Sub v1 over REST on 127.0.0.1, so the real
``google-cloud-pubsub`` client (``transport="rest"``) talks to it as to
pubsub.googleapis.com. Request fields are checked against the pubsub.v1 discovery
document google-api-python-client ships, and labels against Pub/Sub's rules (at most
64; keys start with a lowercase letter; keys and values at most 63 lowercase letters,
digits, ``-`` or ``_``). ``patch`` replaces the label map, as the API does.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any, Self

from werkzeug.exceptions import HTTPException
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from dynagent.testing.loopback import CallLog, GoogleRefusal, LoopbackApp

_ROUTES = Map([Rule("/v1/projects/<project>/topics/<topic>", endpoint="topic")])
_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


@cache
def _topic_fields() -> frozenset[str]:
    documents = resources.files("googleapiclient.discovery_cache") / "documents"
    document = json.loads((documents / "pubsub.v1.json").read_text())
    return frozenset(document["schemas"]["Topic"]["properties"])


class LocalPubSubTopics(LoopbackApp):
    server_name = "local-pubsub-topics"

    def __init__(self) -> None:
        super().__init__()
        self.topics: dict[str, dict[str, Any]] = {}
        self.calls = CallLog[str]()
        self._lock = threading.Lock()

    def start(self) -> Self:
        _topic_fields()
        return super().start()

    def client(self) -> Any:
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        return pubsub_v1.PublisherClient(
            transport="rest",
            client_options=ClientOptions(api_endpoint=self.endpoint),
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        )

    def _app(self, environ: Any, start_response: Any) -> Iterable[bytes]:
        request = Request(environ)
        try:
            _, args = _ROUTES.bind("localhost").match(request.path)
            name = f"projects/{args['project']}/topics/{args['topic']}"
            self.calls.record(f"{request.method} {name}")
            with self._lock:
                payload = self._handle(request, name)
            response = Response(json.dumps(payload), 200, content_type="application/json")
        except GoogleRefusal as refused:
            response = refused.response()
        except HTTPException as unrouted:
            response = Response(str(unrouted), unrouted.code or 404)
        return response(environ, start_response)

    def _handle(self, request: Request, name: str) -> dict[str, Any]:
        if request.method == "GET":
            return self._get(name)
        body = json.loads(request.get_data() or b"{}")
        if request.method == "PUT":
            if name in self.topics:
                raise GoogleRefusal(409, "ALREADY_EXISTS", "Resource already exists in the project")
            self.topics[name] = {"name": name, "labels": _labels(_fields(body).get("labels"))}
            return self.topics[name]
        if request.method == "PATCH":
            topic = self._get(name)
            unknown = set(body) - {"topic", "updateMask"}
            if unknown:
                raise GoogleRefusal(400, "INVALID_ARGUMENT", f"Unknown fields: {sorted(unknown)}")
            mask = [
                path
                for path in str(
                    request.args.get("updateMask") or body.get("updateMask") or ""
                ).split(",")
                if path
            ]
            update = _fields(body.get("topic") or {})
            if not mask:
                raise GoogleRefusal(
                    400, "INVALID_ARGUMENT", "The update_mask in the UpdateTopicRequest must be set"
                )
            for path in mask:
                if path != "labels":
                    raise GoogleRefusal(400, "INVALID_ARGUMENT", f"not modelled: {path}")
                topic["labels"] = _labels(update.get("labels"))
            return topic
        raise GoogleRefusal(405, "UNIMPLEMENTED", f"{request.method} is not served")

    def _get(self, name: str) -> dict[str, Any]:
        if name not in self.topics:
            raise GoogleRefusal(404, "NOT_FOUND", "Resource not found (resource=topic).")
        return self.topics[name]


def _fields(topic: dict[str, Any]) -> dict[str, Any]:
    unknown = set(topic) - _topic_fields()
    if unknown:
        raise GoogleRefusal(400, "INVALID_ARGUMENT", f"Unknown Topic fields: {sorted(unknown)}")
    return topic


def _labels(given: Any) -> dict[str, str]:
    labels: dict[str, str] = dict(given or {})
    if len(labels) > 64:
        raise GoogleRefusal(400, "INVALID_ARGUMENT", "A resource may have at most 64 labels")
    for key, value in labels.items():
        if not _KEY.fullmatch(key) or not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise GoogleRefusal(400, "INVALID_ARGUMENT", f"Invalid label {key!r}: {value!r}")
    return labels
