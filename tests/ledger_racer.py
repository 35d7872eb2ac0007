"""One racing release, run as its own process by the ledger race tests (tests/kafka/
test_ledger_race.py, tests/state/test_ledger_race_dir.py).

    python ledger_racer.py dir DIR EPSILON START_AT
    python ledger_racer.py topic TOPIC EPSILON START_AT BOOTSTRAP

Imports and connects first, then waits until the UNIX time START_AT so every racer calls
``release_store`` at the same instant, and prints one JSON line: the outcome (``released``,
``refused`` or ``error``) and the released epsilon.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    import logging

    from panstream.errors import BudgetExhaustedError, StateError
    from panstream.state.stores import DirectoryStore, release_store

    kind, target, eps, start_at = argv[0], argv[1], float(argv[2]), float(argv[3])
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    if kind == "dir":
        store = DirectoryStore(target)
    else:
        from panstream.sources.kafka import state_client, topic_store

        store = topic_store(target, state_client(argv[4]), create=False)  # type: ignore[assignment]
    time.sleep(max(0.0, start_at - time.time()))
    out: dict[str, object]
    try:
        rel, _ = release_store(store, eps, "laplace", keyed=True)
        out = {"outcome": "released", "epsilon": rel.epsilon, "remaining": rel.budget_remaining}
    except BudgetExhaustedError as exc:
        out = {"outcome": "refused", "why": str(exc)}
    except StateError as exc:
        out = {"outcome": "error", "why": str(exc)}
    finally:
        if kind != "dir":
            store.log.close()  # type: ignore[attr-defined]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
