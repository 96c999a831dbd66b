"""probes/packages.py reads each distribution's metadata headers once: the same names, versions and
requirements importlib.metadata gives (parsing the whole file three times), on planted folders."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

from pytest_dgx_spark.probes.packages import canonical, list_distributions

LONG_BODY = "\n".join(f"Line {i} of a README: Requires-Dist: not-a-header" for i in range(400))


def _dist_info(site: Path, name: str, version: str, requires: list[str], body: str = LONG_BODY) -> None:
    folder = site / f"{name.replace('-', '_')}-{version}.dist-info"
    folder.mkdir(parents=True)
    headers = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    headers += [f"Requires-Dist: {r}" for r in requires]
    (folder / "METADATA").write_text("\n".join(headers) + "\n\n" + body + "\n")


def _egg_info(site: Path, name: str, version: str, requires_txt: str) -> None:
    folder = site / f"{name}-{version}-py3.11.egg-info"
    folder.mkdir(parents=True)
    (folder / "PKG-INFO").write_text(f"Metadata-Version: 1.1\nName: {name}\nVersion: {version}\n")
    (folder / "requires.txt").write_text(requires_txt)


def test_names_versions_and_requirements_match_importlib(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _dist_info(site, "Flash_Attn", "2.8.3", ["torch", 'einops; extra == "x"'])
    _dist_info(site, "plain-pkg", "1.0", [])
    _egg_info(site, "oldstyle", "0.9", "numpy>=1.20\n\n[cuda]\ncupy\n")
    found = list_distributions([str(site)])
    assert found["errors"] == 0
    assert sorted(found["dists"]) == ["flash-attn", "oldstyle", "plain-pkg"]
    for dist in metadata.distributions(path=[str(site)]):  # importlib's own answers, each parsed whole
        mine = found["dists"][canonical(dist.metadata["Name"])]
        assert (mine["name"], mine["version"], mine["requires"]) == (
            dist.metadata["Name"], dist.version, list(dist.requires or []))
    assert found["dists"]["oldstyle"]["requires"] == ["numpy>=1.20", 'cupy; extra == "cuda"']
    assert found["dists"]["flash-attn"]["requires"] == ["torch", 'einops; extra == "x"']
    assert found["dists"]["plain-pkg"]["requires"] == []


def test_the_first_copy_on_the_path_wins_and_bad_metadata_is_counted(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _dist_info(first, "torch", "2.11.0", [])
    _dist_info(second, "torch", "2.9.0", [])
    _dist_info(second, "broken", "1.0", [])
    (second / "broken-1.0.dist-info" / "METADATA").write_bytes(b"\xff\xfe\x00garbage")
    fifo_dir = second / "fifo-1.0.dist-info"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "METADATA")  # would block open() forever: never opened
    found = list_distributions([str(first), str(second)])
    assert found["dists"]["torch"]["version"] == "2.11.0"
    assert "broken" not in found["dists"] and "fifo" not in found["dists"]
    assert found["errors"] == 2
