"""The distribution's package list covers the checkout: every folder with an __init__.py under the
core and the part folders is a listed package, mapped from where it lies (pyproject.toml)."""

from support import ROOT, package_folders

MAPPED = ("causewatch", "agent", "daemon", "analytics", "probe")


def test_every_package_folder_is_a_listed_package():
    folders = package_folders()
    on_disk = {init.parent for top in MAPPED for init in (ROOT / top).rglob("__init__.py")}
    assert sorted(map(str, on_disk - set(folders.values()))) == [], "add these to pyproject's packages"
    assert all((folder / "__init__.py").is_file() for folder in folders.values()), folders


def test_the_parts_are_mapped_into_causewatch():
    folders = package_folders()
    assert folders["causewatch"] == ROOT / "causewatch"
    assert folders["causewatch.agent"] == ROOT / "agent"
    assert folders["causewatch.analytics.causal"] == ROOT / "analytics" / "causal"
    assert folders["causewatch.probe.workloads"] == ROOT / "probe" / "workloads"
