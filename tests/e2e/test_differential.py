"""The differential suite: published CRDs of the ecosystem at pinned commits, a valid custom
resource of each and mutations derived from each schema rule (tests/differential.py), each
judged offline by `reconcile validate` and held to the verdict the real API server gave
(`kubectl apply --server-side --dry-run=server`, recorded by tools/differential.py in
tests/data/differential/verdicts.json).

Offline, every case's verdict (accept or refuse) must be the server's, unless the case is in
SERVER_ONLY with the reason only the server can judge it (a cost limit, ratcheting on
update, a rule the evaluator leaves to the server), or in XFAIL as a known disagreement
not yet fixed. With RECONCILE_TEST_KUBECONFIG set, the recorded verdicts are confirmed
against that server too (the CRDs are created for real and waited for; every case is one
dry run).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from tests import differential as d
from tests.support import REAL_KUBECONFIG, REPO

# Case id -> why only the API server can judge it; every entry must be a real disagreement.
SERVER_ONLY: Final[dict[str, str]] = {}
# Case id -> why validate disagrees with the server today (a known bug, not yet fixed).
XFAIL: Final[dict[str, str]] = {}

RECORDED: Final = d.recorded()
CASES: Final = {case.id: case for case in d.all_cases()}


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, d.Verdict]:
    """`reconcile validate` over one tree of every case (in process, one run)."""
    return d.offline_verdicts(tmp_path_factory.mktemp("differential"), tuple(CASES.values()))


def test_each_crd_is_pinned_to_its_repository_and_commit() -> None:
    found = d.crds()
    assert 8 <= len(found) <= 15
    assert len({crd.repo for crd in found}) >= 8  # projects, not only CRDs
    for crd in found:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", crd.repo), crd.repo
        assert re.fullmatch(r"[0-9a-f]{40}", crd.commit), crd.commit
        assert crd.path.endswith(Path(crd.file).name), crd.file
        assert crd.document["kind"] == "CustomResourceDefinition", crd.file
    size = sum(path.stat().st_size for path in d.DATA.rglob("*") if path.is_file())
    assert size < 4 * 1024 * 1024, "the published CRDs are kept to a few MB"


def test_the_cases_are_deterministic_and_cover_each_rule() -> None:
    again = [case.digest for crd in d.crds() for case in d.cases_of(crd)]
    assert again == [case.digest for case in CASES.values()]
    assert len(CASES) >= 300
    rules = {case.rule for case in CASES.values()}
    for rule in (
        "sample", "cel", "type", "enum", "pattern", "pattern-newline", "maxLength",
        "minimum", "list-map", "list-set", "unknown-field", "required", "null-default",
    ):  # fmt: skip
        assert rule in rules, rule
    names = [(case.crd.file, case.name) for case in CASES.values()]
    assert len(set(names)) == len(names)


def test_the_recorded_verdicts_are_of_these_cases() -> None:
    """verdicts.json was recorded for exactly these bodies: a changed generator or sample
    needs `python tools/differential.py --kubeconfig ... --record` against a server."""
    recorded = RECORDED["cases"]
    assert set(recorded) == set(CASES)
    stale = [i for i, case in CASES.items() if recorded[i]["digest"] != case.digest]
    assert not stale, f"recorded for other bodies: {stale[:5]}"
    assert all(recorded[i]["verdict"] in ("accept", "refuse") for i in recorded)
    assert all(recorded[i]["verdict"] == "accept" for i in CASES if i.split("/")[1] == "sample")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_offline_verdict_is_the_servers(case_id: str, offline: dict[str, d.Verdict]) -> None:
    if case_id in SERVER_ONLY:
        pytest.skip(f"server only: {SERVER_ONLY[case_id]}")
    if case_id in XFAIL:
        pytest.xfail(XFAIL[case_id])
    server = RECORDED["cases"][case_id]
    mine = offline[case_id]
    assert mine.verdict == server["verdict"], (
        f"{case_id} ({CASES[case_id].path}): server {server['verdict']} "
        f"{server['message'][:300]!r}; validate {mine.verdict} {mine.message[:300]!r}"
    )


def test_each_server_only_case_is_a_real_disagreement(offline: dict[str, d.Verdict]) -> None:
    for table in (SERVER_ONLY, XFAIL):
        for case_id, reason in table.items():
            assert case_id in CASES and reason.strip(), case_id
            assert offline[case_id].verdict != RECORDED["cases"][case_id]["verdict"], (
                f"{case_id} agrees with the server now: take it out of the table"
            )


def test_the_figure_in_the_docs_is_todays(offline: dict[str, d.Verdict]) -> None:
    counts = d.figure(offline, {k: v["verdict"] for k, v in RECORDED["cases"].items()})
    assert sum(counts.values()) == len(CASES)
    page = (REPO / "docs" / "concepts" / "workloads.md").read_text()
    stated = (
        f"agreed on {counts['agree']} of {len(CASES)}; false accepts {counts['false accept']}, "
        f"false refusals {counts['false refusal']}, crashes {counts['crash']}"
    )
    assert stated in " ".join(page.split()), stated


def test_offline_figures_are_classified() -> None:
    accept, refuse, crash = d.Verdict("accept"), d.Verdict("refuse"), d.Verdict("crash")
    assert d.outcome(accept, "accept") == d.outcome(refuse, "refuse") == "agree"
    assert d.outcome(accept, "refuse") == "false accept"
    assert d.outcome(refuse, "accept") == "false refusal"
    assert d.outcome(crash, "accept") == d.outcome(crash, "refuse") == "crash"


@pytest.mark.slow
@pytest.mark.skipif(not REAL_KUBECONFIG, reason="needs RECONCILE_TEST_KUBECONFIG")
def test_the_recorded_verdicts_are_the_live_servers() -> None:
    """Every case against the live server (about 500 dry runs, 8 at a time: seconds)."""
    assert REAL_KUBECONFIG is not None
    server = d.Server(REAL_KUBECONFIG)
    created = server.install(d.crds())
    try:
        live = server.verdicts(tuple(CASES.values()))
    finally:
        server.uninstall(created)
    differ = [i for i, v in live.items() if v.verdict != RECORDED["cases"][i]["verdict"]]
    assert not differ, [(i, live[i].message[:200]) for i in differ[:10]]
