"""What mutation testing (`make mutate`, docs/testing.md) found the alerting store's tests
did not pin down: its small key-value table."""

from __future__ import annotations

from pathlib import Path

from anchorwatch.alerting.store import Store


def test_meta_values_are_read_back_replaced_and_kept_across_opens(tmp_path: Path) -> None:
    store = Store(tmp_path)
    assert store.meta_get("refit_at") is None
    store.meta_set("refit_at", "1764403200000")
    assert store.meta_get("refit_at") == "1764403200000"
    store.meta_set("refit_at", "1764403260000")
    assert store.meta_get("refit_at") == "1764403260000"
    assert store.meta_get("other") is None
    assert Store(tmp_path).meta_get("refit_at") == "1764403260000"
