"""The ELF dynamic-section reader and the environment scan (probes/elf.py, dist_files.py).

Real objects throughout: gcc-built stubs and extension modules (tests/doubles/elfkit.py),
the venv's own shared objects checked against ``readelf -d``, and hand-assembled
ELF32 big-endian images checked against pyelftools where it is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_dgx_spark.probes import dist_files, elf

from doubles import elfkit

pytestmark = pytest.mark.skipif(not elfkit.gcc_available(), reason="gcc is needed to build real ELF files")


# ---------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("libcudart.so.12", ("libcudart", 12)),
        ("libcudart.so.13.0.96", ("libcudart", 13)),
        ("libcublasLt.so.13", ("libcublasLt", 13)),
        ("libcublas.so.12", ("libcublas", 12)),
        ("libnvrtc.so.12", ("libnvrtc", 12)),
        ("libcudart-9335f6a2.so.12", ("libcudart", 12)),  # auditwheel's name for a bundled copy
        ("libnvrtc-builtins.so.13.0", None),
        ("libcufft.so.12", None),  # keeps major 12 inside CUDA 13
        ("libcusparse.so.12", None),
        ("libcusolver.so.12", None),
        ("libcudart.so", None),  # the dev symlink carries no major
        ("libcudart_static.a", None),
    ],
)
def test_only_libraries_whose_major_tracks_cuda_are_tracked(name: str, expected) -> None:
    assert elf.tracked(name) == expected


def test_recorded_cu130_torch_needs_cudart_13_next_to_cufft_12(h200: Path) -> None:
    text = (h200 / "readelf_torch_cuda_needed.txt").read_text()
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)
    assert "libcufft.so.12" in needed and "libcusparse.so.12" in needed
    majors = {elf.tracked(n) for n in needed} - {None}
    assert majors == {("libcudart", 13), ("libcublas", 13), ("libcublasLt", 13)}


# ---------------------------------------------------------------------- the reader


def test_reads_needed_and_soname_of_gcc_built_objects(kit: elfkit.Kit) -> None:
    assert elf.read_dynamic(str(kit.ext12)).needed == ("libcudart.so.12", "libc.so.6")
    assert elf.read_dynamic(str(kit.ext13)).needed == (
        "libcudart.so.13",
        "libcublas.so.13",
        "libcufft.so.12",
        "libc.so.6",
    )
    assert elf.read_dynamic(str(kit.cudart12)).soname == "libcudart.so.12"
    assert elf.read_dynamic(str(kit.plain)).needed == ("libc.so.6",)


def _readelf_needed(path: str) -> tuple[list[str], str | None]:
    out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True, timeout=30).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return needed, soname.group(1) if soname else None


@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")
def test_agrees_with_readelf_on_this_pythons_own_shared_objects() -> None:
    roots = elf.site_roots(sys.path) or [os.path.dirname(os.__file__)]
    stats = elf.ScanStats()
    files = [p for _, p, _ in elf.iter_shared_objects(roots, stats, max_files=40)]
    if len(files) < 5:
        pytest.skip("fewer than 5 shared objects installed here")
    for path in files:
        needed, soname = _readelf_needed(path)
        got = elf.read_dynamic(path)
        assert list(got.needed) == needed, path
        assert got.soname == soname, path


def _elf_image(*, cls: int, big: bool, needed: list[str], soname: str | None) -> bytes:
    """A minimal shared object: ELF header, PT_LOAD + PT_DYNAMIC, a string table."""
    e = ">" if big else "<"
    ehsize, phentsize = (64, 56) if cls == 2 else (52, 32)
    strtab = b"\0"
    offsets = []
    for name in [*needed, *([soname] if soname else [])]:
        offsets.append(len(strtab))
        strtab += name.encode() + b"\0"
    str_off = ehsize + 2 * phentsize
    dyn_off = str_off + len(strtab) + (-(str_off + len(strtab)) % 8)
    entries = [(1, o) for o in offsets[: len(needed)]]
    if soname:
        entries.append((14, offsets[-1]))
    entries += [(5, str_off), (10, len(strtab)), (0, 0)]
    dyn_fmt = e + ("qQ" if cls == 2 else "iI")
    dyn = b"".join(struct.pack(dyn_fmt, t, v) for t, v in entries)
    total = dyn_off + len(dyn)
    ident = b"\x7fELF" + bytes([cls, 2 if big else 1, 1, 0]) + b"\0" * 8
    if cls == 2:
        hdr = struct.pack(e + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 64, 0, 0)
        load = struct.pack(e + "IIQQQQQQ", 1, 5, 0, 0, 0, total, total, 0x1000)
        dynamic = struct.pack(e + "IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 8)
    else:
        hdr = struct.pack(e + "HHIIIIIHHHHHH", 3, 20, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 40, 0, 0)
        load = struct.pack(e + "IIIIIIII", 1, 0, 0, 0, total, total, 5, 0x1000)
        dynamic = struct.pack(e + "IIIIIIII", 2, dyn_off, dyn_off, dyn_off, len(dyn), len(dyn), 6, 4)
    body = ident + hdr + load + dynamic + strtab
    body += b"\0" * (dyn_off - len(body))
    return body + dyn


@pytest.mark.parametrize(("cls", "big"), [(1, True), (1, False), (2, True), (2, False)])
def test_reads_32_and_64_bit_both_byte_orders(tmp_path: Path, cls: int, big: bool) -> None:
    path = tmp_path / "libx.so"
    path.write_bytes(_elf_image(cls=cls, big=big, needed=["libcudart.so.12", "libm.so.6"], soname="libx.so"))
    got = elf.read_dynamic(str(path))
    assert got == elf.Dynamic(("libcudart.so.12", "libm.so.6"), "libx.so")
    pytest.importorskip("elftools")
    assert elf.read_dynamic_pyelftools(str(path)) == got  # an independent reader agrees on our image


# ---------------------------------------------------------------------- bad files


@pytest.mark.parametrize("cut", [0, 3, 10, 40, 63, 100, 300, 1000])
def test_truncated_files_are_skipped_with_a_reason_never_raised(
    kit: elfkit.Kit, tmp_path: Path, cut: int
) -> None:
    path = tmp_path / "cut.so"
    path.write_bytes(kit.ext12.read_bytes()[:cut])
    with pytest.raises(elf.ElfError) as info:
        elf.read_dynamic(str(path))
    assert info.value.reason in ("truncated", "not_elf", "malformed")


def test_a_corrupt_dynamic_pointer_is_malformed_not_a_crash(tmp_path: Path) -> None:
    image = bytearray(_elf_image(cls=2, big=False, needed=["libcudart.so.12"], soname=None))
    # point DT_STRTAB far outside the PT_LOAD segment
    at = bytes(image).index(struct.pack("<qQ", 5, 64 + 2 * 56))
    image[at : at + 16] = struct.pack("<qQ", 5, 1 << 40)
    path = tmp_path / "bad.so"
    path.write_bytes(bytes(image))
    with pytest.raises(elf.ElfError) as info:
        elf.read_dynamic(str(path))
    assert info.value.reason == "malformed"


@pytest.mark.parametrize("offset", [1 << 40, (1 << 63) + 5, (1 << 64) - 1])
def test_absurd_segment_offsets_are_malformed_not_a_crash(tmp_path: Path, offset: int) -> None:
    image = bytearray(_elf_image(cls=2, big=False, needed=["libcudart.so.12"], soname=None))
    # the PT_DYNAMIC program header is the second one: its p_offset is 8 bytes in
    struct.pack_into("<Q", image, 64 + 56 + 8, offset)
    path = tmp_path / "huge.so"
    path.write_bytes(bytes(image))
    with pytest.raises(elf.ElfError) as info:
        elf.read_dynamic(str(path))
    assert info.value.reason in ("malformed", "truncated")


def test_corrupted_headers_only_ever_give_an_answer_or_an_elf_error(kit: elfkit.Kit, tmp_path: Path) -> None:
    """Flip bytes in the headers of a real module, 400 times: no other exception escapes."""
    import random

    rng = random.Random(20261130)
    original = kit.ext13.read_bytes()
    path = tmp_path / "fuzz.so"
    outcomes = {"answer": 0, "error": 0}
    for _ in range(400):
        data = bytearray(original)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(16, 1024)] = rng.randrange(256)
        path.write_bytes(bytes(data))
        try:
            elf.read_dynamic(str(path))
            outcomes["answer"] += 1
        except elf.ElfError:
            outcomes["error"] += 1
    assert outcomes["answer"] and outcomes["error"], outcomes


def test_a_huge_program_header_table_is_refused_not_allocated(tmp_path: Path) -> None:
    image = bytearray(_elf_image(cls=2, big=False, needed=["libcudart.so.12"], soname=None))
    struct.pack_into("<HH", image, 54, 0xFFFF, 0xFFFE)  # e_phentsize, e_phnum: a 4 GiB table
    path = tmp_path / "wide.so"
    path.write_bytes(bytes(image))
    with pytest.raises(elf.ElfError) as info:
        elf.read_dynamic(str(path))
    assert info.value.reason == "malformed"


def _tree_with_bad_files(kit: elfkit.Kit, site: Path) -> None:
    elfkit.install(site, "good", "1.0", {"good/_C.so": kit.ext12})
    (site / "junk").mkdir()
    (site / "junk" / "notelf.so").write_text("this is not an ELF file\n")
    (site / "junk" / "empty.so.1").write_bytes(b"")
    (site / "junk" / "cut.so").write_bytes(kit.ext12.read_bytes()[:200])
    (site / "junk" / "folder.so").mkdir()
    (site / "junk" / "folder.so" / "inner.so").write_bytes(kit.ext13.read_bytes())
    os.symlink("loop_b.so", site / "junk" / "loop_a.so")
    os.symlink("loop_a.so", site / "junk" / "loop_b.so")
    os.symlink("missing.so", site / "junk" / "dangling.so")
    os.symlink("..", site / "junk" / "parent")  # a directory loop: never followed
    (site / "good" / "__pycache__").mkdir()
    (site / "good" / "__pycache__" / "x.so").write_bytes(kit.ext12.read_bytes())  # not walked


def test_a_tree_of_bad_files_is_counted_by_reason(kit: elfkit.Kit, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _tree_with_bad_files(kit, site)
    result = elf.scan([str(site)])
    assert result.skipped == {
        "not_elf": 2,
        "truncated": 1,
        "directory": 1,
        "symlink_loop": 2,
        "broken_symlink": 1,
    }
    assert result.files == 2  # good/_C.so and folder.so/inner.so
    assert sorted(os.path.basename(x.path) for x in result.linkers) == ["_C.so", "inner.so"]
    assert elf.Scan.from_dict(json.loads(json.dumps(result.to_dict()))) == result  # JSON, for the store


def test_a_symlinked_library_is_read_once(kit: elfkit.Kit, tmp_path: Path) -> None:
    lib = tmp_path / "site-packages" / "nvidia" / "cuda_runtime" / "lib"
    lib.mkdir(parents=True)
    shutil.copyfile(kit.cudart12, lib / "libcudart.so.12.8.90")
    os.symlink("libcudart.so.12.8.90", lib / "libcudart.so.12")
    result = elf.scan([str(tmp_path / "site-packages")])
    assert result.files == 1
    assert len(result.providers) == 1 and result.providers[0].major == 12
    assert result.linkers == []  # a toolkit library is a provider, not a module


def test_unreadable_file_and_folder_are_counted_as_a_non_root_user(kit: elfkit.Kit) -> None:
    """Root reads every file, so the scan runs in a forked child that dropped to
    ``nobody`` (a non-root run does it directly). Uses a folder under /tmp that
    ``nobody`` can traverse: pytest's tmp folders are private to their owner."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="spark-elf-"))
    try:
        base.chmod(0o755)
        site = base / "site-packages"
        elfkit.install(site, "pkg", "1.0", {"pkg/_C.so": kit.ext12, "pkg/secret.so": kit.ext13})
        (site / "pkg" / "secret.so").chmod(0o000)
        (site / "locked").mkdir()
        (site / "locked" / "hidden.so").write_bytes(kit.ext12.read_bytes())
        (site / "locked").chmod(0o000)
        for folder in (site, site / "pkg"):
            folder.chmod(0o755)
        if os.geteuid() != 0:
            result = elf.scan([str(site)])
        else:
            result = _scan_as_nobody(str(site))
        assert result.skipped == {"unreadable": 1, "unreadable_dir": 1}
        assert result.files == 1
    finally:
        for folder in (base / "site-packages" / "locked",):
            if folder.exists():
                folder.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def _scan_as_nobody(root: str) -> elf.Scan:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, scan, report, exit without running pytest's teardown
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            payload = json.dumps(elf.scan([root]).to_dict()).encode()
        except BaseException as exc:  # pragma: no cover - reported to the parent
            payload = json.dumps({"error": repr(exc)}).encode()
        os.write(write, payload)
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    os.waitpid(pid, 0)
    result = json.loads(b"".join(chunks))
    assert "error" not in result, result
    return elf.Scan.from_dict(result)


def test_scan_stops_at_the_file_limit_and_says_so(kit: elfkit.Kit, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    elfkit.install(site, "many", "1.0", {f"many/m{i}.so": kit.ext12 for i in range(5)})
    result = elf.scan([str(site)], max_files=3)
    assert result.files == 3
    assert result.stopped == "3 files"


# ---------------------------------------------------------------------- environment, owners, ldconfig


def test_site_roots_take_package_folders_only(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "site-packages"
    target = tmp_path / "target"  # pip install --target
    (target / "x-1.0.dist-info").mkdir(parents=True)
    project = tmp_path / "project"  # a checkout with a stray egg-info
    (project / "x.egg-info").mkdir(parents=True)
    site.mkdir(parents=True)
    nested = site / "inner" / "site-packages"
    nested.mkdir(parents=True)
    roots = elf.site_roots([str(site), str(target), str(project), str(nested), str(tmp_path / "absent")])
    assert roots == [os.path.realpath(site), os.path.realpath(target)]


def test_owners_name_the_distribution_from_its_record(kit: elfkit.Kit, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    elfkit.install(site, "flash-attn", "2.7.4", {"flash_attn_2_cuda" + elfkit.EXT_SUFFIX: kit.ext12})
    elfkit.install(site, "vllm", "0.11.0", {"vllm/_C.abi3.so": kit.ext13, "vllm/__init__.py": ""})
    elfkit.install(
        site, "nvidia-cuda-runtime-cu12", "12.8.90", {"nvidia/cuda_runtime/lib/libcudart.so.12": kit.cudart12}
    )
    owners = dist_files.shared_object_owners([str(site)])["owners"]
    fa = owners[os.path.join(os.path.realpath(site), "flash_attn_2_cuda" + elfkit.EXT_SUFFIX)]
    assert (fa["name"], fa["version"], fa["hint"]) == ("flash-attn", "2.7.4", "flash_attn_2_cuda")
    assert owners[os.path.join(os.path.realpath(site), "vllm", "_C.abi3.so")]["hint"] == "vllm"
    rt = owners[os.path.join(os.path.realpath(site), "nvidia", "cuda_runtime", "lib", "libcudart.so.12")]
    assert rt["name"] == "nvidia-cuda-runtime-cu12"
    assert not any(p.endswith(".py") for p in owners)


def test_ldconfig_output_is_parsed_for_tracked_libraries() -> None:
    # the real format of `ldconfig -p` (glibc), with CUDA lines as the toolkit registers them
    text = (
        "538 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
        "\tlibcudart.so.13 (libc6,x86-64) => /usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13\n"
        "\tlibcudart.so.12 (libc6,AArch64) => /usr/local/cuda-12.8/targets/sbsa-linux/lib/libcudart.so.12\n"
        "\tlibcufft.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcufft.so.12\n"
        "\tlibcublasLt.so.13 (libc6,x86-64) => /usr/local/cuda/lib64/libcublasLt.so.13\n"
    )
    got = elf.parse_ldconfig(text)
    assert [(x.lib, x.major) for x in got] == [
        ("libcudart", 13),
        ("libcudart", 12),
        ("libcublasLt", 13),
    ]
    assert got[1].path == "/usr/local/cuda-12.8/targets/sbsa-linux/lib/libcudart.so.12"
    assert got[1].name == "libcudart.so.12" and got[1].flags == "libc6,AArch64"


@pytest.mark.skipif(shutil.which("ldconfig") is None, reason="ldconfig not installed")
def test_this_machines_ldconfig_output_parses_without_error() -> None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    lines = [ln for ln in out.splitlines() if "=>" in ln]
    assert lines, "ldconfig -p printed no library"
    # every line is in the format the parser expects; only tracked names come back
    assert all(elf._LDCONFIG_LINE.match(ln) for ln in lines)
    assert all(elf.tracked(str(x.name)) for x in elf.parse_ldconfig(out))


def test_library_dirs_list_tracked_files(kit: elfkit.Kit, tmp_path: Path) -> None:
    lib = tmp_path / "lib64"
    lib.mkdir()
    shutil.copyfile(kit.cudart12, lib / "libcudart.so.12")
    (lib / "libfoo.so.1").write_text("")
    got = elf.list_library_dirs([str(lib), str(tmp_path / "absent")])
    assert [(x.lib, x.major) for x in got] == [("libcudart", 12)]
