"""Probe kits as the daemon keeps them: one registry row per (app, kit) with the manifest inline.

`kit_row` checks a built kit's manifest and makes its row; the daemon's writer stores it
(`store.results.register_kit`), so agents get the whole manifest in run_probe.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from causewatch.probe.kit import check_manifest, load_manifest


def kit_row(manifest: dict, path: str = "", now: float | None = None) -> dict:
    """The probe_kits row of a checked manifest: app, kit, path, manifest (JSON), registered."""
    check_manifest(manifest)
    return {"app": manifest["app"], "kit": manifest["kit"], "path": path, "manifest": json.dumps(manifest),
            "registered": time.time() if now is None else now}


def kit_folder_row(kit: str) -> dict:
    """The row of the built kit in folder `kit` (its manifest loaded and checked)."""
    return kit_row(load_manifest(kit), str(Path(kit).resolve()))
