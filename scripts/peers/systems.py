"""The systems measured beside PyTorch, the packages they come from, and how each is found.

Imports no torch: the parent process uses it to check arguments and plan rows before any worker
starts.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re


class InputError(Exception):
    """Bad input: reported as one line, exit status 2, nothing written."""


@dataclasses.dataclass(frozen=True)
class Package:
    """A Python package that holds one or more systems."""

    key: str
    flag: str
    module: str
    dist: str
    title: str
    get: str


PACKAGES: dict[str, Package] = {
    p.key: p
    for p in [
        Package(
            "paper-cce", "--paper-cce", "cut_cross_entropy", "cut-cross-entropy",
            "the paper's kernel (its authors' fork of Cut Cross-Entropy)",
            "the folder ml-cross-entropy of github.com/jhuang265/Calibrating-LLMs-with-Label-Smoothing",
        ),
        Package(
            "apple-cce", "--apple-cce", "cut_cross_entropy", "cut-cross-entropy",
            "Cut Cross-Entropy (Apple)", "pip install cut-cross-entropy",
        ),
        Package(
            "liger-kernel", "--liger", "liger_kernel", "liger-kernel", "Liger-Kernel",
            "pip install liger-kernel",
        ),
    ]
}

# The fork's label-smoothing forward: present in the paper's package, absent from Apple's.
_FORK_MARKER = "cce_smooth_forward.py"
_LIGER_MARKER = os.path.join("ops", "fused_linear_cross_entropy.py")


@dataclasses.dataclass(frozen=True)
class System:
    """One external row family: a callable of a package, measured at every β it supports."""

    name: str
    package: str
    label: str
    smoothing: bool
    grads_in_forward: bool
    note: str = ""
    default: bool = True
    probe: bool = False


_GRADS_NOTE = ("its forward computes dE and dC; its bwd only scales them by the upstream "
               "gradient (the paper's table: NA)")

SYSTEMS: dict[str, System] = {
    s.name: s
    for s in [
        System("paper-ours", "paper-cce", "the paper's kernel, impl cce (its \"Ours\")", True,
               False, "linear_cross_entropy(label_smoothing=β, impl=\"cce\"), filter_eps left "
               "at its default \"auto\""),
        System("paper-nofilter", "paper-cce", "the paper's kernel, impl cce, filter_eps=None",
               True, False, "linear_cross_entropy(label_smoothing=β, impl=\"cce\", "
               "filter_eps=None)"),
        System("paper-fused", "paper-cce",
               "the paper's kernel, impl cce_fused (its \"Fused Version\")", True, True,
               _GRADS_NOTE),
        System("paper-fused-nofilter", "paper-cce",
               "the paper's kernel, impl cce_fused, filter_eps=None", True, True, _GRADS_NOTE,
               default=False),
        System("paper-filter", "paper-cce", "the paper's kernel, impl cce, its filter switched on",
               True, False,
               "its LinearSmoothCrossEntropyFunction called with filter_eps=\"auto\" resolved, as "
               "cce_linear_cross_entropy would pass it were its _handle_eps call not commented "
               "out; the forward then also averages the logits and the backward sorts the "
               "vocabulary by them", default=False, probe=True),
        System("cce", "apple-cce", "Cut Cross-Entropy (Apple), impl cce", False, False,
               "linear_cross_entropy(impl=\"cce\"): gradient filter and vocabulary sorting on"),
        System("cce-nofilter", "apple-cce", "Cut Cross-Entropy (Apple), filter_eps=None", False,
               False, "linear_cross_entropy(impl=\"cce\", filter_eps=None)"),
        System("liger", "liger-kernel", "Liger-Kernel fused linear cross-entropy", True, True,
               "LigerFusedLinearCrossEntropyFunction.apply(E, C, t, None, None, -100, 0.0, β, "
               "\"mean\"); " + _GRADS_NOTE),
        System("torch-linear-ce", "pytorch", "torch.nn.functional.linear_cross_entropy", True,
               False, "linear_cross_entropy(E, C, t, label_smoothing=β) where the installed "
               "torch has it"),
    ]
}

DEFAULT_SYSTEMS = [s.name for s in SYSTEMS.values() if s.default]

NO_SMOOTHING = "no label smoothing"


def arithmetic(system: System, dtype: str) -> str:
    """What the system multiplies with: tensor cores in the input dtype, through which compiler."""
    cores = f"{dtype} tensor cores" if dtype != "f32" else "fp32"
    if system.package == "liger-kernel":
        return f"{cores} (cuBLAS matmuls, Triton softmax)"
    if system.package == "pytorch":
        return f"{cores} (PyTorch)"
    return f"{cores} (Triton)"


def parse_systems(text: str, filter_probe: bool) -> list[System]:
    """The systems of a comma list (`none` for none); the filter probe adds paper-filter."""
    names = [] if text.strip() in ("", "none") else [x.strip() for x in text.split(",")]
    out: list[System] = []
    for name in names:
        if name not in SYSTEMS:
            raise InputError(
                f"unknown system '{name}' (known: {', '.join(SYSTEMS)}; or none)")
        if SYSTEMS[name] not in out:
            out.append(SYSTEMS[name])
    if filter_probe and SYSTEMS["paper-filter"] not in out:
        out.append(SYSTEMS["paper-filter"])
    order = list(SYSTEMS)
    return sorted(out, key=lambda s: order.index(s.name))


@dataclasses.dataclass(frozen=True)
class Located:
    """Where a package was found: `path` goes first on sys.path (None: the installed one)."""

    path: str | None
    version: str


def _is_fork(pkg_dir: str) -> bool:
    return os.path.isfile(os.path.join(pkg_dir, _FORK_MARKER))


def _identity_problem(pkg: Package, pkg_dir: str) -> str | None:
    """Why the package at pkg_dir is not `pkg`, or None when it is."""
    if pkg.key == "paper-cce" and not _is_fork(pkg_dir):
        return (f"its {pkg.module} has no label smoothing ({_FORK_MARKER}): Apple's package, "
                "not the paper's fork")
    if pkg.key == "apple-cce" and _is_fork(pkg_dir):
        return (f"its {pkg.module} is the paper's fork (it has {_FORK_MARKER}), not Apple's "
                "Cut Cross-Entropy")
    if pkg.key == "liger-kernel" and not os.path.isfile(os.path.join(pkg_dir, _LIGER_MARKER)):
        return f"its {pkg.module} has no {_LIGER_MARKER}"
    return None


def _root_of(pkg: Package, given: str) -> str:
    """The directory holding the package folder: the given one, its src/, or its parent."""
    d = os.path.abspath(given)
    if not os.path.isdir(d):
        raise InputError(f"{pkg.flag} {given}: not a directory")
    candidates = [d, os.path.join(d, "src")]
    if os.path.basename(d) == pkg.module:
        candidates.append(os.path.dirname(d))
    for root in candidates:
        if os.path.isfile(os.path.join(root, pkg.module, "__init__.py")):
            return root
    raise InputError(
        f"{pkg.flag} {given}: holds no {pkg.module} package (no {pkg.module}/__init__.py there)")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def _dir_version(pkg: Package, root: str) -> str:
    """`__version__` of the package, else the version of a pyproject.toml beside or above it."""
    m = re.search(r"^__version__\s*=\s*[\"']([^\"']+)", _read(os.path.join(root, pkg.module,
                                                                           "__init__.py")), re.M)
    if m:
        return m.group(1)
    for d in (root, os.path.dirname(root)):
        m = re.search(r"^version\s*=\s*\"([^\"]+)\"", _read(os.path.join(d, "pyproject.toml")),
                      re.M)
        if m:
            return m.group(1)
    return "?"


def _dir_commit(root: str) -> str | None:
    """The commit of a copied source folder, from the table of a README.md beside it (a row
    naming the folder and a cell that starts with a hexadecimal commit), or of a git checkout's
    HEAD file."""
    name = os.path.basename(root.rstrip(os.sep))
    if name == "src":
        name = os.path.basename(os.path.dirname(root))
    for line in _read(os.path.join(os.path.dirname(root), "README.md")).splitlines():
        if line.startswith("|") and f"`{name}/`" in line:
            for cell in line.split("|"):
                m = re.match(r"([0-9a-f]{7,40})(?:\s|$)", cell.strip())
                if m:
                    return m.group(1)
    for d in (root, os.path.dirname(root)):
        head = _read(os.path.join(d, ".git", "HEAD")).strip()
        if head.startswith("ref: "):
            head = _read(os.path.join(d, ".git", *head[5:].split("/"))).strip()
        if re.fullmatch(r"[0-9a-f]{40}", head):
            return head[:12]
    return None


def _installed(pkg: Package) -> Located | str:
    """The installed package, or why it cannot be used."""
    try:
        spec = importlib.util.find_spec(pkg.module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return f"not found: pass {pkg.flag} DIR or install it ({pkg.get})"
    pkg_dir = list(spec.submodule_search_locations)[0]
    problem = _identity_problem(pkg, pkg_dir)
    if problem:
        return f"not found: the installed {pkg.module} is not {pkg.title}: {problem}"
    try:
        dist = importlib.metadata.distribution(pkg.dist)
        version = f"{pkg.dist} {dist.version}"
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        commit = url.get("vcs_info", {}).get("commit_id")
        if commit:
            version += f", commit {commit[:12]}"
    except importlib.metadata.PackageNotFoundError:
        version = f"{pkg.module} (installed, no package metadata)"
    return Located(None, f"{version} (installed)")


def locate(pkg: Package, given: str | None) -> Located | str:
    """The package from a given directory (InputError when it holds no such package) or the
    installed one; a string saying why when neither is there."""
    if given is None:
        return _installed(pkg)
    root = _root_of(pkg, given)
    problem = _identity_problem(pkg, os.path.join(root, pkg.module))
    if problem:
        raise InputError(f"{pkg.flag} {given}: {problem}")
    commit = _dir_commit(root)
    version = f"{pkg.dist} {_dir_version(pkg, root)}" + (f", commit {commit}" if commit else "")
    return Located(root, f"{version} (from {given})")


TORCH_METHODS: dict[str, str] = {
    "baseline": "PyTorch baseline (cross_entropy on logits.float())",
    "compiled": "PyTorch torch.compile",
    "chunked": "PyTorch chunked CE (torchtune, 8 chunks)",
    "matmul": "PyTorch matmul E·Cᵀ alone",
}
TORCH_ARITHS = ("bf16", "fp32")


@dataclasses.dataclass(frozen=True)
class TorchCell:
    """One cell of the PyTorch rows: a method in an arithmetic at one β and mode."""

    name: str
    arith: str
    method: str
    label: str
    arithmetic: str
    beta: float
    mode: str


def torch_arithmetic(arith: str, dtype: str) -> str:
    """`bf16`: the inputs in their dtype on tensor cores; `fp32`: upcast, TF32 off."""
    if arith == "fp32":
        return "fp32 FMA (TF32 off)"
    return f"{dtype} tensor cores" if dtype != "f32" else "fp32"


def torch_cells(methods: list[str], ariths: list[str], fp32_methods: list[str],
                betas: list[float], dtype: str) -> list[TorchCell]:
    """The PyTorch cells in measuring order: per arithmetic, method, β and mode (the product
    alone: first β, fwd only). fp32 rows are named torch-<method>-fp32."""
    cells = []
    for arith in ariths:
        for name in methods:
            if arith == "fp32" and name not in fp32_methods:
                continue
            suffix = "-fp32" if arith == "fp32" else ""
            label = TORCH_METHODS[name] + (", fp32" if arith == "fp32" else "")
            for beta in betas if name != "matmul" else betas[:1]:
                for mode in ["fwd"] if name == "matmul" else ["fwd", "bwd", "fwd+bwd"]:
                    cells.append(TorchCell(name, arith, f"torch-{name}{suffix}", label,
                                           torch_arithmetic(arith, dtype), beta, mode))
    return cells
