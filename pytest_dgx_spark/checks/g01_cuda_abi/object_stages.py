"""G1's stages about the extension objects: another CUDA major than the reference, an object that
does not ``dlopen``, a per-CUDA-version package without a build for torch's CUDA, which of a
package's per-arch builds loaded, and CUDA runtimes of another major that nothing links."""

from __future__ import annotations

import os

from pytest_dgx_spark.checks.g01_cuda_abi.facts import Linker, Load, Provider
from pytest_dgx_spark.checks.g01_cuda_abi.view import (
    View,
    gist,
    majors,
    objects,
    owned,
    short_name,
    version,
    wheels,
    who,
)
from pytest_dgx_spark.checks.kit import Findings, count, first_n, plus_more
from pytest_dgx_spark.model import SHORT_WIDTH
from pytest_dgx_spark.probes import elf


def mismatch(v: View, out: Findings) -> None:
    """Objects linking another CUDA major than the reference (with their load error)."""
    ref, mismatched = v.reference, _mismatched(v)
    out.read("mismatched_objects", len(mismatched))
    if ref is None or not mismatched:
        return
    groups: dict[str, list[str]] = {}
    for x in mismatched:
        v.reported.add(x.path)
        groups.setdefault(who(x, v.f.owners), []).append(f"{os.path.basename(x.path)} -> {_with_error(v, x)}")
    out.note(*(f"{w}: " + "; ".join(items) for w, items in groups.items()))
    shown = [f"{w} ({first_n(items, 1, sep=' ')})" for w, items in groups.items()]
    names = [w.split(" ", 1)[0] for w in groups if "(no installed" not in w]
    them = names[0] if len(names) == 1 else "them"
    short = f"reinstall {them} for CUDA {ref}" if names else f"rebuild for CUDA {ref}"
    out.fail(
        f"{objects(len(mismatched), 'link')} another CUDA major than {v.ref_text}: {first_n(shown)}",
        f"pip uninstall {' '.join(names)} and reinstall builds for CUDA {ref} ({wheels(ref)})"
        if names else f"remove or rebuild those files for CUDA {ref}",
        _mismatch_head(v, mismatched[0], len(groups), short), short, code="G1.cuda-major-mismatch")


def _mismatched(v: View) -> list[Linker]:
    """The objects that link another major than the reference (torch's, or one of several)."""
    ref = v.reference
    if ref is None or (v.ref_from != "torch" and len(v.linker_majors) <= 1):
        return []
    return sorted((x for x in v.linkers if majors(x) != {ref}), key=lambda x: x.path)


def _with_error(v: View, x: Linker) -> str:
    """``libcudart.so.12: cannot open shared object file`` when that is why it did not load."""
    needs = ", ".join(v.other_needs(x))
    o = v.failed.get(x.path)
    if not o or o.retry_ok:
        return needs
    missing = v.missing_lib(x.path)
    if missing and missing in needs.split(", "):
        return needs.replace(missing, f"{missing}: cannot open shared object file")
    return f"{needs}; does not load: {gist(o.error or '')}"


def _mismatch_head(v: View, x: Linker, dists: int, short_fix: str) -> str:
    """The default line's finding: distribution, object, the library not found (or linked)
    and the build's major, as much as fits beside the fix."""
    owner, others, missing = who(x, v.f.owners), v.other_needs(x), v.missing_lib(x.path)
    lib = f"{os.path.basename(missing)} not found" if missing else f"links {others[0] if others else 'another CUDA major'}"
    built = "/".join(str(m) for m in sorted(majors(x) - {v.reference or 0})) or "?"
    obj, sep = short_name(x.path), ": " if missing else " "
    room = SHORT_WIDTH - len("G1 FAIL: ; fix: ") - len(short_fix)
    texts = (f"{owner}: {obj}{sep}{lib} (CUDA {built} build)", f"{owner}: {obj}{sep}{lib}", f"{owner}{sep}{lib}")
    candidates = [plus_more(text, dists) for text in texts]  # "(+N more)": the other distributions
    return next((c for c in candidates if len(c) <= min(room, 90)), candidates[-1])


def loads(v: View, out: Findings) -> None:
    """Objects that did not dlopen (not already named as another major's build)."""
    by_path = {e.path: e for e in v.f.requested}
    for path, o in sorted(v.failed.items()):
        entry = by_path.get(path) or Load()
        name = entry.name or os.path.basename(path)
        if o.retry_ok:
            out.note(f"{name} loads only once its package is imported (it preloads what it needs)")
            continue
        if o.imported is not None and o.imported.error:
            out.note(f"import {entry.module} fails too: {o.imported.error}")
        if path in v.reported:
            continue
        owner = v.f.owner(path)
        dist = (owner.name if owner else "") or entry.module or name
        err = (o.error or "failed").removeprefix(f"{path}: ").replace(path, name)
        fix, short = _load_fix(v, dist, err)
        who_ = owned(owner, name)
        out.fail(f"{who_}: {name} does not load: {err}", fix, f"{who_}: {short_name(name)}: {gist(err)}", short,
                 code="G1.load-failed")


def _load_fix(v: View, dist: str, err: str) -> tuple[str, str]:
    """The fix for an object that does not load, and its short form."""
    major = v.reference
    if "undefined symbol" in err:
        return (
            f"reinstall {dist} built against torch {v.torch_version or v.torch_dist or ''} "
            f"(pip install --force-reinstall --no-build-isolation {dist}), or pip uninstall {dist}",
            f"reinstall {dist} for this torch")
    if major:
        return (f"reinstall {dist} built for CUDA {major} ({wheels(major)}), or pip uninstall {dist}",
                f"reinstall {dist} for CUDA {major}")
    return f"reinstall or uninstall {dist}", f"reinstall {dist}"


def arch_notes(v: View, out: Findings) -> None:
    """Which of a package's per-GPU-arch alternatives the child loaded."""
    chosen = v.f.torch.variants
    groups: dict[str, list[Load]] = {}
    for e in v.f.requested:
        if e.group and e.tag is None:
            groups.setdefault(e.group, []).append(e)
    for key, members in sorted(groups.items()):
        picked = next((e.name for e in members if key in chosen and e.path == chosen[key]), None)
        what = f"loaded {picked}" if picked else "none loaded (the torch child did not get there)"
        out.note(f"{key}: {len(members)} builds per GPU arch, one loaded per process; {what}")


def variant_sets(v: View, out: Findings) -> None:
    """A per-CUDA-version package: which build matches torch, or that none does."""
    for _key, info in sorted(v.variants.items()):
        span = f"{version(info.tags[0])}–{version(info.tags[-1])}"
        if info.chosen is not None:
            out.note(f"{info.owner} ships {len(info.tags)} CUDA builds ({span}); "
                     f"it loads its CUDA {version(info.chosen)} build")
        elif v.torch_cuda and v.reference is not None:
            dist = info.owner.split(" ", 1)[0]
            out.fail(
                f"{info.owner} ships builds for CUDA {span} and none for torch's CUDA {v.torch_cuda}",
                f"pip install -U {dist} (a release with a CUDA {v.reference} build), or pip uninstall {dist}",
                f"{info.owner}: no build for CUDA {v.reference} (has {span})", f"pip install -U {dist}",
                code="G1.no-cuda-variant")


def leftovers(v: View, out: Findings) -> None:
    """CUDA runtimes of another major that nothing links (a wheel, ldconfig, LD_LIBRARY_PATH)."""
    f, ref = v.f, v.reference
    if ref is None:
        return
    providers = list(v.scan.providers)
    found = _unlinked(v, ref, providers)
    if not found:
        return
    parts = [f"{lib}.so.{major} {', '.join(dict.fromkeys(w))}" for (lib, major), w in sorted(found.items())]
    out.note(*(f"leftover: {part}" for part in parts))
    pips = sorted({o.name for p in providers if (p.lib, p.major) in found and (o := f.owner(p.path))})
    fix = f"pip uninstall {' '.join(pips)}" if pips else ""
    if any((p.lib, p.major) in found for p in f.ldconfig):
        fix += ("; " if fix else "") + "remove the old toolkit's /etc/ld.so.conf.d entry and run ldconfig"
    fix += " — so a CUDA 12 wheel fails at install, not half-loaded mid-run"
    found_majors = "/".join(sorted({str(m) for _, m in found}))
    out.warn(
        f"leftover CUDA {found_majors} libraries linked by nothing ({first_n(parts, 2)})", fix.strip(),
        f"leftover CUDA {found_majors} libraries linked by nothing ({count(len(parts), 'library', 'libraries')})",
        f"pip uninstall {' '.join(pips[:2])}" if pips else "remove the old ld.so.conf.d entry",
        code="G1.leftover-runtime")


def _unlinked(v: View, ref: int, providers: list[Provider]) -> dict[tuple[str, int], list[str]]:
    """(lib, major) of another major than ``ref`` that nothing links -> where each copy is."""
    f = v.f
    needed = {elf.tracked(n) for x in v.linkers for n in x.needs}

    def from_wheel(p: Provider) -> str:
        o = f.owner(p.path)
        return f"installed by {o.name} {o.version}" if o else f"at {p.path}"

    found: dict[tuple[str, int], list[str]] = {}
    for items, where in (
        (providers, from_wheel),
        (f.ldconfig, lambda p: f"registered in ldconfig ({p.path})"),
        (f.ld_library_path, lambda p: f"on LD_LIBRARY_PATH ({p.path})"),
    ):
        for p in items:
            if p.major != ref and (p.lib, p.major) not in needed:
                found.setdefault((p.lib, p.major), []).append(where(p))
    return found
