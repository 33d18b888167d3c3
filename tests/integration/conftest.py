"""Every module here runs causewatch's daemons and agents as real processes (and some run Slurm,
Prometheus or Alertmanager beside them): each test is marked `service`, which `make test-fast` leaves out."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.service)
