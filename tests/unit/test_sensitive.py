"""Masking and redacting a Secret's values."""

from __future__ import annotations

import base64
import json
from typing import Any

from reconcile.engine.diff import Action, FieldChange, object_drift
from reconcile.kube import sensitive

SECRET: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {
        "name": "creds",
        "namespace": "kube-system",
        "annotations": {
            sensitive.LAST_APPLIED: json.dumps({"data": {"password": "aHVudGVyMg=="}}),
            "team": "gpu",
        },
    },
    "data": {"password": "aHVudGVyMg=="},  # hunter2
}


def test_masked_replaces_every_value_with_a_salted_digest_and_keeps_the_rest() -> None:
    masked = sensitive.masked(SECRET, "uid-1")
    assert masked["data"]["password"] == sensitive.digest("aHVudGVyMg==", "uid-1")
    assert masked["data"]["password"] != sensitive.digest("aHVudGVyMg==", "uid-2")
    annotations = masked["metadata"]["annotations"]
    assert annotations["team"] == "gpu"
    assert annotations[sensitive.LAST_APPLIED].startswith("sha256:")
    assert "aHVudGVyMg" not in json.dumps(masked)
    assert SECRET["data"]["password"] == "aHVudGVyMg=="  # the original is left alone


def test_values_hold_every_form_a_message_could_quote() -> None:
    found = sensitive.values(SECRET)
    assert {"aHVudGVyMg==", "hunter2"} <= found
    quoted = sensitive.values({"stringData": {"token": 'a"b'}})
    assert {'a"b', 'a\\"b', base64.b64encode(b'a"b').decode()} <= quoted
    # not a string: the API server's refusal quotes it
    assert "12345" in sensitive.values({"data": {"pin": 12345}})


def test_redact_strikes_long_values_anywhere_and_short_ones_only_when_quoted() -> None:
    text = 'Invalid value: "hunter2" (hunter2), "abc" abc'
    assert sensitive.redact(text, {"hunter2", "abc"}) == 'Invalid value: "***" (***), "***" abc'


def test_a_redactor_learns_from_secrets_and_secret_lists_only() -> None:
    redactor = sensitive.Redactor()
    redactor.learn({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "plain-config"}})
    redactor.learn({"apiVersion": "v1", "kind": "SecretList", "items": [SECRET]})
    assert redactor("hunter2 plain-config") == "*** plain-config"


def test_a_key_set_in_string_data_scopes_the_same_key_of_data() -> None:
    config = {"apiVersion": "v1", "kind": "Secret", "stringData": {"password": "x"}}
    live = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "b2xk"}}
    result = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "bmV3"}}
    assert object_drift(config, live, result) == []  # what the server shows is data
    [change] = object_drift(sensitive.secret_scope(config), live, result)
    assert change.path == ("data", "password")


def test_a_sensitive_change_never_shows_its_value() -> None:
    change = FieldChange(
        path=("data", "password"),
        action=Action.UPDATE,
        before="sha256:aa",
        after="sha256:bb",
        sensitive=True,
    )
    assert change.shown_value == "(sensitive value changed)"
    added = change.model_copy(update={"action": Action.ADD, "before": None})
    assert added.shown_value == "(sensitive value)"
    assert change.model_dump(mode="json")["sensitive"] is True
    assert "sensitive" not in change.model_copy(update={"sensitive": False}).model_dump()
