"""The differential suite against a real control plane: every case of tests/differential.py
(published CRDs, a sample of each, mutations derived from each schema rule) is sent to the
API server as `kubectl apply --server-side --dry-run=server` sends it (an apply patch with
`dryRun=All`), after the CRDs are created for real and Established, and judged offline by
`reconcile validate`; prints the agreement (agree / false accept / false refusal / crash) and
each disagreement.

    python tools/differential.py --kubeconfig KUBECONFIG [--record] [--kubectl]

`--record` writes the server's verdicts to tests/data/differential/verdicts.json, which
tests/e2e/test_differential.py holds `validate` to without a cluster. `--kubectl` runs the
real `kubectl apply --server-side --dry-run=server` per case instead (slower; the same
verdicts).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import differential as d


def kubectl_verdicts(kubeconfig: str, cases: tuple[d.Case, ...]) -> dict[str, d.Verdict]:
    kubectl = shutil.which("kubectl") or str(Path(sys.executable).with_name("kubectl"))
    found = {}
    for case in cases:
        done = subprocess.run(
            [
                kubectl,
                "--kubeconfig",
                kubeconfig,
                "apply",
                "--server-side",
                "--dry-run=server",
                "--force-conflicts",
                "-f",
                "-",
            ],
            input=json.dumps(case.body),
            capture_output=True,
            text=True,
            check=False,
        )
        found[case.id] = d.Verdict(
            "accept" if done.returncode == 0 else "refuse", done.stderr.strip()
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--record", action="store_true", help="write verdicts.json")
    parser.add_argument("--kubectl", action="store_true", help="one kubectl process per case")
    options = parser.parse_args(argv)

    cases = d.all_cases()
    server = d.Server(options.kubeconfig)
    server.install(d.crds())
    if options.kubectl:
        judged = kubectl_verdicts(options.kubeconfig, cases)
    else:
        judged = server.verdicts(cases)
    with tempfile.TemporaryDirectory() as scratch:
        offline = d.offline_verdicts(Path(scratch), cases)
    counts = d.figure(offline, {k: v.verdict for k, v in judged.items()})
    for case in cases:
        result = d.outcome(offline[case.id], judged[case.id].verdict)
        if result != "agree":
            print(f"{result}: {case.id} ({case.path or '-'})")
            print(f"    server: {judged[case.id].verdict} {judged[case.id].message[:300]}")
            print(f"    offline: {offline[case.id].verdict} {offline[case.id].message[:300]}")
    total = len(cases)
    print(
        f"{total} cases, {len(d.crds())} CRDs: agree {counts['agree']} "
        f"({100 * counts['agree'] / total:.1f} %), false accept {counts['false accept']}, "
        f"false refusal {counts['false refusal']}, crash {counts['crash']}"
    )
    if options.record:
        document = {
            "server": server.version(),
            "recorded": datetime.date.today().isoformat(),
            "how": "kubectl apply --server-side --dry-run=server (tools/differential.py)",
            "cases": {
                case.id: {
                    "digest": case.digest,
                    "verdict": judged[case.id].verdict,
                    "message": judged[case.id].message,
                }
                for case in cases
            },
        }
        d.VERDICTS.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
        print(f"recorded {d.VERDICTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
