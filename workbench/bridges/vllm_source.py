"""vLLM's own source for one pinned release: flags, config fields and metric names read from it.

The workbench emits ``vllm serve`` command lines and ``vllm.LLM(...)`` kwargs, and reads vLLM's
benchmark JSON and Prometheus counters; vLLM itself never runs here (it pins another torch). Every
name it emits or reads is therefore checked against the Python source of the release named by
:data:`VLLM_VERSION`, parsed with :mod:`ast` (nothing of vLLM is imported):

* ``vllm serve`` flags: the ``add_argument("--x", ...)`` calls of ``EngineArgs.add_cli_args`` and
  ``AsyncEngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``) and of ``make_arg_parser``
  (``vllm/entrypoints/common/cli_args.py``), plus one ``--field-name`` per field of ``FrontendArgs``
  (its ``add_cli_args`` loop); a flag built from a ``bool`` config field also has its
  ``--no-x`` form (``get_kwargs`` gives it ``argparse.BooleanOptionalAction``);
* ``vllm.LLM`` kwargs: the parameters of ``LLM.__init__`` (``vllm/entrypoints/llm.py``) and the fields
  of the ``EngineArgs`` dataclass, which receives the remaining ``**kwargs``;
* config dataclass fields (``SpeculativeConfig``, ``KVTransferConfig``, ...) and ``Literal`` values
  (``CacheDType``, ``KVRole``, ``SpeculativeMethod``, ``QuantizationMethods``);
* registered KV connectors (``KVConnectorFactory.register_connector`` calls) and environment
  variables (``vllm/envs.py``);
* the Prometheus counter names of ``SpecDecodingProm`` and the keys ``vllm bench serve`` writes.

The source is the release's wheel from PyPI, fetched once with ``pip download --no-deps`` and cached
(only its ``.py`` files under :data:`KEEP`) in ``$WORKBENCH_CACHE/vllm/<version>/``;
``WORKBENCH_VLLM_SOURCE`` may point at a wheel, an sdist or an unpacked source tree instead.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from workbench.models import cache_dir, sha256_file
from workbench.models.hf import replace_dir

__all__ = ["KEEP", "VLLM_VERSION", "WHEEL_SHA256", "VllmSource", "VllmSourceUnavailable"]

VLLM_VERSION = "0.33.0"  # newest vLLM release on PyPI when this bridge was written (commit g4ba787ec9)
# sha256 of the wheel `pip download` fetches (vllm-<v>-cp38-abi3-manylinux_2_28_x86_64.whl), checked
WHEEL_SHA256 = {"0.33.0": "4b6bdec4ab269990bf70d45a3c1e94c3760a27064513760193b26d6f0da883aa"}

# the parts of the wheel the bridge reads (about 6 MB of Python out of 336 MB)
KEEP = ("vllm/engine/", "vllm/config/", "vllm/entrypoints/", "vllm/benchmarks/", "vllm/v1/metrics/",
        "vllm/v1/spec_decode/", "vllm/distributed/kv_transfer/", "vllm/envs.py", "vllm/_version.py",
        "vllm/model_executor/layers/quantization/__init__.py")


class VllmSourceUnavailable(RuntimeError):
    """The pinned vLLM release could not be fetched (no package index, or pip failed)."""


def _keep(name: str) -> bool:
    return name.endswith(".py") and any(name.startswith(k) or name == k for k in KEEP)


def _extract(archive: Path, dest: Path) -> None:
    """Copy the kept ``.py`` files of a wheel (zip) or sdist (tar.gz) into ``dest/vllm/...``."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest, members=[n for n in z.namelist() if _keep(n)])
        return
    with tarfile.open(archive) as t:  # sdist: vllm-X/vllm/...
        members = []
        for m in t.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and _keep(rel):
                m.name = rel
                members.append(m)
        t.extractall(dest, members=members, filter="data")


def _pip_download(version: str, dest: Path, timeout: int) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--only-binary", ":all:",
           "--platform", "manylinux_2_28_x86_64", "--python-version", "3.12", "--no-cache-dir",
           "--disable-pip-version-check", "-d", str(dest)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise VllmSourceUnavailable(f"`pip download vllm=={version}` timed out after {timeout} s") from e
    wheels = sorted(dest.glob("vllm-*.whl"))
    if r.returncode or not wheels:
        raise VllmSourceUnavailable(f"`{' '.join(cmd[2:])}` failed: {(r.stderr or r.stdout).strip()[-400:]}")
    return wheels[0]


def _install(archive: Path, dest: Path, sha256: str | None = None) -> None:
    """Extract the kept files of ``archive`` into ``dest`` atomically (temp dir, then rename), with
    ``SOURCE.json`` recording the archive's name and sha256 (checked against ``sha256`` if given)."""
    digest = sha256_file(archive)
    if sha256 and digest != sha256:
        raise VllmSourceUnavailable(f"{archive.name}: sha256 {digest} is not the pinned {sha256}")
    with replace_dir(dest) as tmp:
        _extract(archive, tmp)
        (tmp / "SOURCE.json").write_text(json.dumps({"file": archive.name, "sha256": digest}))
        tmp.chmod(0o755)


@dataclass(frozen=True)
class VllmSource:
    """The parsed source of one vLLM release (``root`` holds ``vllm/...``)."""

    version: str
    root: Path
    origin: dict = field(default_factory=dict, compare=False)  # wheel file name and sha256

    @classmethod
    def fetch(cls, version: str = VLLM_VERSION, *, timeout: int = 900) -> VllmSource:
        """The cached source of ``version``, downloading the wheel once (336 MB, kept: ~6 MB of .py).

        Raises :class:`VllmSourceUnavailable` when pip cannot reach a package index, with pip's error.
        """
        override = os.environ.get("WORKBENCH_VLLM_SOURCE")
        if override and Path(override).expanduser().is_dir():
            return cls(version, Path(override).expanduser(), {"path": override})
        if override:
            archive = Path(override).expanduser()
            dest = cache_dir() / "vllm" / f"{version}-{archive.stem}"
            if not (dest / "SOURCE.json").exists():
                _install(archive, dest)
        else:
            dest = cache_dir() / "vllm" / version
            if not (dest / "SOURCE.json").exists():
                with tempfile.TemporaryDirectory() as td:
                    wheel = _pip_download(version, Path(td), timeout)
                    _install(wheel, dest, WHEEL_SHA256.get(version))
        src = cls(version, dest, json.loads((dest / "SOURCE.json").read_text()))
        if src.release != version:
            raise VllmSourceUnavailable(f"{dest} holds vLLM {src.release}, not {version}; delete it")
        return src

    # -- files -----------------------------------------------------------------------------------
    def path(self, rel: str) -> Path:
        p = self.root / rel
        if not p.exists():
            raise FileNotFoundError(f"vLLM {self.version} source has no {rel} (looked in {self.root})")
        return p

    def tree(self, rel: str) -> ast.Module:
        return _parse(self.path(rel))

    @cached_property
    def release(self) -> str:
        """``__version__`` from ``vllm/_version.py`` (the version the wheel was built as)."""
        for node in self.tree("vllm/_version.py").body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    any(getattr(t, "id", "") == "__version__" for t in node.targets):
                return str(node.value.value)
        raise KeyError(f"__version__ not found in {self.root}/vllm/_version.py")

    # -- dataclass fields and Literal values ------------------------------------------------------
    def class_fields(self, class_name: str, rel: str | None = None) -> dict[str, str]:
        """``{field: annotation source}`` of a (pydantic) dataclass, base classes of the same file
        included; searched in ``rel`` or else every file of ``vllm/config/``. Raises ``KeyError``."""
        files = [rel] if rel else sorted(str(p.relative_to(self.root)) for p in (self.root / "vllm/config").glob("*.py"))
        for f in files:
            classes = {n.name: n for n in self.tree(f).body if isinstance(n, ast.ClassDef)}
            if class_name in classes:
                return _fields(classes, class_name)
        raise KeyError(f"class {class_name} not found in vLLM {self.version} ({files[:3]}...)")

    def literal(self, name: str, rel: str) -> tuple[str, ...]:
        """Values of the ``Literal`` alias ``name`` in ``rel``, nested aliases of that file expanded."""
        aliases = {}
        for node in self.tree(rel).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                aliases[node.target.id] = node.value
        if name not in aliases:
            raise KeyError(f"{name} is not defined in vLLM {self.version} {rel}")
        return tuple(dict.fromkeys(_literal_values(aliases[name], aliases)))

    # -- CLI flags and LLM kwargs -------------------------------------------------------------------
    @cached_property
    def serve_flags(self) -> frozenset[str]:
        """Every option string ``vllm serve`` accepts (long and short forms)."""
        arg_utils = self.tree("vllm/engine/arg_utils.py")
        cli = self.tree("vllm/entrypoints/common/cli_args.py")
        flags: set[str] = set()
        for tree, owner, fn in ((arg_utils, "EngineArgs", "add_cli_args"),
                                (arg_utils, "AsyncEngineArgs", "add_cli_args"), (cli, None, "make_arg_parser")):
            flags |= self._flags_of(_function(tree, owner, fn))
        for name, ann in self.class_fields("FrontendArgs", "vllm/entrypoints/common/cli_args.py").items():
            flag = "--" + name.replace("_", "-")
            flags.add(flag)
            if _is_bool(ann):
                flags.add("--no-" + flag[2:])
        return frozenset(flags)

    def unknown_flags(self, argv) -> list[str]:
        """Options of ``argv`` (``--x``, ``--x=v``, ``-x``; numbers are values) ``vllm serve`` lacks."""
        opts = [str(a).split("=", 1)[0] for a in argv if str(a).startswith("-")]
        return [o for o in opts if o not in self.serve_flags and not o.lstrip("-").replace(".", "").isdigit()]

    def _flags_of(self, fn: ast.FunctionDef) -> set[str]:
        kw_class = {}  # "scheduler_kwargs" -> "SchedulerConfig" (from `x = get_kwargs(Cls)`)
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", "") == "get_kwargs" and node.value.args and \
                    isinstance(node.value.args[0], ast.Name):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        kw_class[t.id] = node.value.args[0].id
        out = set()
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                continue
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
            out.update(names)
            if any(_is_boolean_action(k) for k in node.keywords) or self._from_bool_field(node, kw_class):
                out.update("--no-" + n[2:] for n in names if n.startswith("--"))
        return out

    def _from_bool_field(self, call: ast.Call, kw_class: dict) -> bool:
        for node in ast.walk(ast.Module(body=[ast.Expr(k.value) for k in call.keywords], type_ignores=[])):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and \
                    node.value.id in kw_class and isinstance(node.slice, ast.Constant):
                try:
                    fields = self.class_fields(kw_class[node.value.id])
                except KeyError:
                    return False
                return _is_bool(fields.get(node.slice.value, ""))
        return False

    @cached_property
    def llm_kwargs(self) -> frozenset[str]:
        """Keyword arguments ``vllm.LLM(...)`` accepts: its own parameters and ``EngineArgs`` fields."""
        init = _function(self.tree("vllm/entrypoints/llm.py"), "LLM", "__init__")
        own = {a.arg for a in init.args.args + init.args.kwonlyargs if a.arg != "self"}
        return frozenset(own | set(self.class_fields("EngineArgs", "vllm/engine/arg_utils.py")))

    # -- registries, env vars, metric names ---------------------------------------------------------
    @cached_property
    def kv_connectors(self) -> frozenset[str]:
        """Names passed to ``KVConnectorFactory.register_connector`` in the connector factory."""
        tree = self.tree("vllm/distributed/kv_transfer/kv_connector/factory.py")
        return frozenset(c.args[0].value for c in ast.walk(tree) if isinstance(c, ast.Call)
                         and getattr(c.func, "attr", "") == "register_connector"
                         and c.args and isinstance(c.args[0], ast.Constant))

    @cached_property
    def env_vars(self) -> frozenset[str]:
        """Keys of the ``environment_variables`` dict of ``vllm/envs.py``."""
        for node in ast.walk(self.tree("vllm/envs.py")):
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) else None)
            if getattr(target, "id", "") == "environment_variables" and isinstance(node.value, ast.Dict):
                return frozenset(k.value for k in node.value.keys if isinstance(k, ast.Constant))
        raise KeyError(f"environment_variables not found in vLLM {self.version} vllm/envs.py")

    def string_constants(self, rel: str, owner: str | None = None, fn: str | None = None) -> list[str]:
        """String literals of a file, or of one function / method in it, in source order."""
        tree = _function(self.tree(rel), owner, fn) if fn else self.tree(rel)
        return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    def subscript_keys(self, rel: str, owner: str | None, fn: str, var: str) -> set[str]:
        """Constant keys ``k`` of every ``var["k"] = ...`` and ``var = {"k": ...}`` in a function."""
        keys: set[str] = set()
        for node in ast.walk(_function(self.tree(rel), owner, fn)):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and getattr(t.value, "id", "") == var and \
                            isinstance(t.slice, ast.Constant):
                        keys.add(t.slice.value)
                    if getattr(t, "id", "") == var and isinstance(node.value, ast.Dict):
                        keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        return keys


# -- ast helpers ------------------------------------------------------------------------------------
_CACHE: dict[Path, ast.Module] = {}


def _parse(path: Path) -> ast.Module:
    if path not in _CACHE:
        _CACHE[path] = ast.parse(path.read_text(), filename=str(path))
    return _CACHE[path]


def _function(tree: ast.Module, owner: str | None, name: str) -> ast.FunctionDef:
    body = tree.body
    if owner:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == owner), None)
        if cls is None:
            raise KeyError(f"class {owner} not found")
        body = cls.body
    fn = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)
    if fn is None:
        raise KeyError(f"function {owner + '.' if owner else ''}{name} not found")
    return fn


def _fields(classes: dict[str, ast.ClassDef], name: str) -> dict[str, str]:
    cls = classes[name]
    out: dict[str, str] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            out |= _fields(classes, base.id)
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            ann = ast.unparse(node.annotation)
            if not ann.startswith(("ClassVar", "typing.ClassVar")):
                out[node.target.id] = ann
    return out


def _is_bool(annotation: str) -> bool:
    return "bool" in annotation.replace("(", " ").replace("|", " ").replace("[", " ").split()


def _is_boolean_action(kw: ast.keyword) -> bool:
    return kw.arg == "action" and "BooleanOptionalAction" in ast.unparse(kw.value)


def _literal_values(node: ast.AST, aliases: dict) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in aliases:
        return _literal_values(aliases[node.id], aliases)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("Literal"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [v for e in elts for v in _literal_values(e, aliases)]
    if isinstance(node, ast.BinOp):  # Literal[...] | Literal[...]
        return _literal_values(node.left, aliases) + _literal_values(node.right, aliases)
    return []
