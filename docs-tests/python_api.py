#!/usr/bin/env python3
"""Generates the book's Python API reference, docs/reference/python-api.md, from the package.

Every name of ``insitubatch_rs.__all__`` and of the public submodules ``insitubatch_rs.frameworks``
and ``insitubatch_rs.widgets``: its kind, its signature with defaults, its docstring (summary, rest,
and a ``Raises:`` section rendered as a list), a class's public properties and methods, an
exception's bases. The package is imported (the installed one: the test venv's, built from this
tree by scripts/test-python.sh), except ``insitubatch_rs.widgets``, which needs anywidget: it is
read from its source with ``ast``, so the page never depends on what else is installed. What the
Rust extension (``_native``) implements takes its signatures from the type stub ``_native.pyi``
(typed; CI checks it against the extension with stubtest), and from ``inspect`` where the stub
has none.

    python docs-tests/python_api.py --write   # rewrite the page
    python docs-tests/python_api.py --check   # exit 1 when the committed page differs

docs-tests/test_python_api.py runs the check under pytest (scripts/test-docs.sh).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import enum
import importlib
import inspect
import re
import sys
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "python-api.md"
SRC = ROOT / "python-bindings" / "python" / "insitubatch_rs"
STUB = SRC / "_native.pyi"
PACKAGE = "insitubatch_rs"
WRITE_COMMAND = "python docs-tests/python_api.py --write"
# Submodules documented from source rather than imported (an optional dependency at import).
FROM_SOURCE = ("widgets",)
# Submodules imported and documented: their names are the package's own objects.
IMPORTED_SUBMODULES = ("frameworks",)
# Past this, a signature goes one parameter per line.
WIDTH = 88

# The page's sections, in this order; names are alphabetical within each. Every name of
# `__all__` must be in exactly one (a new name fails the generator until it is placed).
GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "The dataset",
        "A dataset over one Zarr store and the configuration it resolved to.",
        ("InSituDataset", "SchedulerConfig"),
    ),
    (
        "Batches and views",
        "What iterating a dataset's split views yields.",
        ("Batch", "BatchIterator", "View"),
    ),
    (
        "Splits and draw orders",
        "Which chunks belong to each split, and the order an epoch draws its samples in.",
        (
            "DrawOrder",
            "SplitManifest",
            "SplitName",
            "block_shuffled_order",
            "chunk_permutation",
            "sequential_order",
            "shuffle_quality",
            "split_by_chunk",
            "valid_anchor_range",
        ),
    ),
    (
        "Transforms",
        "Per-chunk transforms (cached with the chunk) and per-batch transforms.",
        (
            "BatchTransform",
            "ChunkRead",
            "ChunkTransform",
            "DecodedChunk",
            "ReshapingChunkTransform",
            "StandardScaler",
            "applies",
        ),
    ),
    (
        "Framework adapters",
        "Batches to torch, JAX and TensorFlow. Each imports its framework when called, and a "
        "missing one raises `ImportError` naming the extra to install.",
        ("as_tf_dataset", "as_torch", "pin_host_buffers", "to_jax", "to_jax_global", "to_tf", "to_torch"),
    ),
    (
        "Stores and geometry",
        "Opening stores and reading array geometries. The store constructors import their "
        "optional package when called and raise `ImportError` naming the extra without it.",
        (
            "ArrayGeometry",
            "arraylake_store",
            "close_store",
            "ensure_local_dir",
            "fsspec_store",
            "icechunk_store",
            "obstore_store",
            "open_geometries",
            "reference_store",
        ),
    ),
    (
        "Diagnostics",
        "Reports before a pass (`describe()`), stats after one, and the environment for bug reports.",
        (
            "DatasetReport",
            "Depths",
            "PassStats",
            "StageTimes",
            "StoredChunkRead",
            "bottleneck",
            "fleet_summary",
            "debug_info",
            "print_debug_info",
        ),
    ),
    (
        "Errors",
        "The package's own exception classes. Bad arguments raise `ValueError` or `TypeError`, "
        "as each entry's Raises says.",
        ("ArrayNotFoundError", "InsitubatchIOError", "NotAnArrayError"),
    ),
)

# Pages of the book that go further, by name.
SEE_ALSO = {
    "DatasetReport": "[Reference: `describe()`](describe.md) lists every key.",
    "InSituDataset": "[Concepts](../concepts.md) and [Tuning](../tuning.md) explain the options.",
    "PassStats": "[Reference: the pass report](pass-report.md) lists every field.",
    "StageTimes": "[Reference: the pass report](pass-report.md) lists every field.",
    "Depths": "[Reference: the pass report](pass-report.md) lists every field.",
}

# Dunder methods documented when a class defines them with a docstring of their own.
DOCUMENTED_DUNDERS = ("__call__", "__enter__", "__exit__", "__getitem__", "__iter__", "__len__", "__next__")

# insitubatch 0.2.0 is named so on the page ("the anchor", the repository's old shorthand for it,
# reads as nothing to a user; "anchor" now means only a drawn sample).
SHORTHAND = re.compile(r"(?i)\bthe anchor\b(?!s)|\banchor's\b|\banchor-style\b")
ADDRESS = re.compile(r"\s+at 0x[0-9a-fA-F]+")


class GenerationError(Exception):
    """The page cannot be generated (the reason says what to do)."""


# -- docstrings ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Doc:
    summary: str = ""
    body: str = ""
    raises: list[tuple[str, str]] = dataclasses.field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.summary or self.body or self.raises)


ROLE = re.compile(r":(?:py:)?(?:func|meth|class|data|attr|exc|mod|obj):`~?([^`]+)`")
INTRA_DOC = re.compile(r"\[(`[^`\]]+`)\](?![(\[])")


def markdown(text: str) -> str:
    """Docstring text as markdown: Sphinx roles and rustdoc links become code spans, and no line
    is indented (an indented line after a blank one would be a code block, which rustdoc runs)."""
    text = ROLE.sub(r"`\1`", text)
    text = INTRA_DOC.sub(r"\1", text)
    return "\n".join(line.strip() for line in text.splitlines()).strip()


def parse_doc(raw: str | None) -> Doc:
    """Split a docstring into its first paragraph, the rest, and a ``Raises:`` section
    (``Raises:`` alone on a line, then ``Exception: why`` entries indented under it)."""
    if not raw or not raw.strip():
        return Doc()
    lines = inspect.cleandoc(raw).splitlines()
    raises: list[tuple[str, str]] = []
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "Raises:" or lines[i][:1].isspace():
            kept.append(lines[i])
            i += 1
            continue
        i += 1
        entry_indent: int | None = None
        while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
            line = lines[i]
            i += 1
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            if entry_indent is None:
                entry_indent = indent
            m = re.match(r"([A-Za-z_][\w.]*)\s*:\s*(.*)$", line.strip())
            if indent == entry_indent and m:
                raises.append((m.group(1), m.group(2).strip()))
            elif raises:
                name, why = raises[-1]
                raises[-1] = (name, f"{why} {line.strip()}".strip())
            else:
                raise GenerationError(f"a Raises: section must list `Exception: why` entries, got {line.strip()!r}")
    text = markdown("\n".join(kept))
    paragraphs = re.split(r"\n\s*\n", text) if text else []
    summary = paragraphs[0] if paragraphs else ""
    body = "\n\n".join(paragraphs[1:])
    return Doc(summary, body, [(name, markdown(why)) for name, why in raises])


def own_doc(obj: Any) -> str | None:
    """``obj``'s own docstring: not one inherited, and not the one dataclasses makes up."""
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    if isinstance(obj, type) and dataclasses.is_dataclass(obj) and doc and doc.startswith(obj.__name__ + "("):
        return None
    if isinstance(obj, type) and typing.is_typeddict(obj) and doc is None:
        return None
    return doc if isinstance(doc, str) else None


# -- signatures ---------------------------------------------------------------------------------


class Source(str):
    """A default or annotation given as source text (from the stub or ``ast``): shown as written."""

    def __repr__(self) -> str:
        return str(self)


def annotation(a: Any) -> str:
    if a is inspect.Parameter.empty or a is inspect.Signature.empty:
        return ""
    if isinstance(a, str):
        return a
    if isinstance(a, typing.ForwardRef):
        return a.__forward_arg__
    if isinstance(a, type) and not isinstance(a, types.GenericAlias):
        ours = a.__module__ in ("builtins", PACKAGE) or a.__module__.startswith(PACKAGE + ".")
        return a.__qualname__ if ours else f"{a.__module__}.{a.__qualname__}"
    return clean(repr(a))


def clean(text: str) -> str:
    """A repr without memory addresses or the package's private module paths."""
    text = ADDRESS.sub("", text)
    text = re.sub(rf"(?<![\w.]){PACKAGE}\._\w+\.", "", text)
    return re.sub(r"(?<![\w.])(?:typing|builtins)\.", "", text)


def default(value: Any) -> str:
    return clean(repr(value))


def params(sig: inspect.Signature, *, drop_first: bool) -> list[str]:
    out: list[str] = []
    items = list(sig.parameters.values())
    if drop_first and items and items[0].name in ("self", "cls"):
        items = items[1:]
    seen_kw_only = False
    for n, p in enumerate(items):
        if p.kind is p.KEYWORD_ONLY and not seen_kw_only:
            out.append("*")
            seen_kw_only = True
        if p.kind is p.VAR_POSITIONAL:
            seen_kw_only = True
        stars = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = stars + p.name
        ann = annotation(p.annotation)
        if ann:
            text += f": {ann}"
        if p.default is not p.empty:
            text += f" = {default(p.default)}" if ann else f"={default(p.default)}"
        out.append(text)
        last_positional = p.kind is p.POSITIONAL_ONLY and (n + 1 == len(items) or items[n + 1].kind is not p.POSITIONAL_ONLY)
        if last_positional:
            out.append("/")
    return out


def signature_text(name: str, sig: inspect.Signature, *, drop_first: bool = False, returns: bool = True) -> str:
    ps = params(sig, drop_first=drop_first)
    ret = annotation(sig.return_annotation) if returns else ""
    tail = f" -> {ret}" if ret else ""
    one = f"{name}({', '.join(ps)}){tail}"
    if len(one) <= WIDTH or not ps:
        return one
    return f"{name}(\n" + "".join(f"    {p},\n" for p in ps) + f"){tail}"


def stub_signature(node: ast.FunctionDef) -> inspect.Signature:
    """The signature a stub's (or a source file's) ``def`` declares, as source text."""
    a = node.args
    parameters: list[inspect.Parameter] = []

    def ann(x: ast.expr | None) -> Any:
        return inspect.Parameter.empty if x is None else Source(ast.unparse(x))

    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, d) in enumerate(zip(positional, defaults, strict=True)):
        kind = inspect.Parameter.POSITIONAL_ONLY if i < len(a.posonlyargs) else inspect.Parameter.POSITIONAL_OR_KEYWORD
        parameters.append(
            inspect.Parameter(arg.arg, kind, default=inspect.Parameter.empty if d is None else Source(ast.unparse(d)),
                              annotation=ann(arg.annotation))
        )
    if a.vararg:
        parameters.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, annotation=ann(a.vararg.annotation)))
    for arg, kd in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        parameters.append(
            inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY,
                              default=inspect.Parameter.empty if kd is None else Source(ast.unparse(kd)),
                              annotation=ann(arg.annotation))
        )
    if a.kwarg:
        parameters.append(inspect.Parameter(a.kwarg.arg, inspect.Parameter.VAR_KEYWORD, annotation=ann(a.kwarg.annotation)))
    return inspect.Signature(parameters, return_annotation=ann(node.returns), __validate_parameters__=False)


@dataclasses.dataclass
class Stub:
    """The stub's declarations: module-level ``def``s, and each class's members."""

    functions: dict[str, ast.FunctionDef]
    classes: dict[str, dict[str, ast.FunctionDef]]

    @classmethod
    def read(cls, path: Path) -> Stub:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        classes = {
            n.name: {m.name: m for m in n.body if isinstance(m, ast.FunctionDef)}
            for n in tree.body
            if isinstance(n, ast.ClassDef)
        }
        return cls(functions, classes)


def decorators(node: ast.FunctionDef) -> set[str]:
    return {ast.unparse(d) for d in node.decorator_list}


# -- the model of the page ----------------------------------------------------------------------


@dataclasses.dataclass
class Member:
    name: str  # as shown: Class.member
    kind: str
    signature: str
    doc: Doc


@dataclasses.dataclass
class Entry:
    name: str
    kind: str
    note: str  # under the heading, after the kind
    code: str  # the text block: a signature, a class statement
    doc: Doc
    members: list[Member]
    see_also: str = ""


def kind_of(obj: Any) -> str:
    if isinstance(obj, type):
        if issubclass(obj, BaseException):
            return "exception"
        if issubclass(obj, enum.Enum):
            return "enum"
        if typing.is_typeddict(obj):
            return "TypedDict"
        if getattr(obj, "_is_protocol", False):
            return "protocol"
        if dataclasses.is_dataclass(obj):
            return "frozen dataclass" if obj.__dataclass_params__.frozen else "dataclass"  # type: ignore[attr-defined]
        return "class"
    if isinstance(obj, (types.GenericAlias, types.UnionType)) or type(obj).__name__ in ("_GenericAlias", "_UnionGenericAlias", "TypeAliasType"):
        return "type alias"
    if callable(obj):
        return "function"
    return "constant"


class Generator:
    def __init__(self) -> None:
        try:
            self.pkg = importlib.import_module(PACKAGE)
        except ImportError as e:
            raise GenerationError(
                f"cannot import {PACKAGE} in {sys.executable} ({e}): build it into the test venv with "
                "scripts/test-python.sh, then run this with that venv's python"
            ) from e
        self.native = importlib.import_module(f"{PACKAGE}._native")
        self.stub = Stub.read(STUB)
        self.undocumented: list[str] = []
        check_installed_matches_source(Path(str(self.pkg.__file__)).parent)

    def is_native(self, obj: Any) -> bool:
        return any(getattr(self.native, n, None) is obj for n in dir(self.native))

    def note_undocumented(self, name: str, doc: Doc) -> None:
        if doc.empty:
            self.undocumented.append(name)

    # -- one name ------------------------------------------------------------------------------
    def entry(self, name: str, obj: Any) -> Entry:
        kind = kind_of(obj)
        native = self.is_native(obj)
        doc = parse_doc(own_doc(obj))
        self.note_undocumented(name, doc)
        notes = []
        if native:
            notes.append("implemented in Rust")
        if isinstance(obj, type) and obj.__name__ != name:
            notes.append(f"defined as `{obj.__name__}`")
        members: list[Member] = []
        if kind == "function":
            code = self.function_signature(name, obj)
        elif kind == "exception":
            code = f"class {name}({', '.join(base_name(b) for b in obj.__bases__)})"
            mro = " → ".join(f"`{c.__name__}`" for c in obj.__mro__ if c is not object)
            notes.append(f"hierarchy: {mro}")
        elif kind == "enum":
            code = f"class {name}({', '.join(base_name(b) for b in obj.__bases__)}):\n" + "".join(
                f"    {m.name} = {default(m.value)}\n" for m in obj
            ).rstrip("\n")
        elif kind == "TypedDict":
            optional: frozenset[str] = getattr(obj, "__optional_keys__", frozenset())
            keys = sorted(obj.__annotations__.items(), key=lambda kv: kv[0] in optional)  # required first
            code = f"class {name}(TypedDict):\n" + "".join(
                f"    {k}: {annotation(v)}{'  # optional' if k in optional else ''}\n" for k, v in keys
            ).rstrip("\n")
        elif kind == "protocol":
            bases = [base_name(b) for b in obj.__bases__ if b is not typing.Generic]
            code = f"class {name}({', '.join(bases)}):\n" + "".join(
                f"    def {signature_text(attr, self.signature(attr, fn))}: ...\n"
                for attr, fn in obj.__dict__.items()
                if inspect.isfunction(fn) and (attr == "__call__" or not attr.startswith("_"))
            ).rstrip("\n")
        elif kind in ("class", "dataclass", "frozen dataclass"):
            code = self.class_signature(name, obj)
            bases = class_bases(obj)
            if bases:
                notes.append("bases: " + ", ".join(f"`{b}`" for b in bases))
        else:
            code = f"{name} = {default(obj)}"
        if isinstance(obj, type):
            members = self.members(name, obj)
        return Entry(name, kind, "; ".join(notes), code, doc, members, SEE_ALSO.get(name, ""))

    def function_signature(self, name: str, obj: Any) -> str:
        if self.is_native(obj) and name in self.stub.functions:
            return signature_text(name, stub_signature(self.stub.functions[name]))
        return signature_text(name, self.signature(name, obj))

    def signature(self, name: str, obj: Any) -> inspect.Signature:
        try:
            return inspect.signature(obj)
        except (TypeError, ValueError) as e:
            raise GenerationError(f"no signature for {name} (inspect: {e}); add it to _native.pyi") from e

    def class_signature(self, name: str, cls: type) -> str:
        if self.is_native(cls):
            members = self.stub.classes.get(cls.__name__, {})
            for ctor in ("__new__", "__init__"):
                if ctor in members:
                    return signature_text(name, stub_signature(members[ctor]), drop_first=True, returns=False)
        return signature_text(name, self.signature(name, cls), returns=False)

    # -- a class's members ---------------------------------------------------------------------
    def members(self, owner: str, cls: type) -> list[Member]:
        if kind_of(cls) in ("enum", "TypedDict"):
            return []
        fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        native = self.is_native(cls)
        stub = self.stub.classes.get(cls.__name__, {}) if native else {}
        found: list[Member] = []
        for attr, raw in cls.__dict__.items():
            if attr in fields:
                continue
            dunder = attr.startswith("__") and attr.endswith("__")
            if attr.startswith("_") and not (dunder and attr in DOCUMENTED_DUNDERS):
                continue
            member = self.member(f"{owner}.{attr}", cls, attr, raw, stub.get(attr))
            if member is None or (dunder and member.doc.empty):
                continue
            if not dunder:
                self.note_undocumented(member.name, member.doc)
            found.append(member)
        order = {"property": 0, "attribute": 0, "method": 1, "classmethod": 1, "staticmethod": 1}

        def key(m: Member) -> tuple[int, int, str]:
            short = m.name.rsplit(".", 1)[1]
            return (short.startswith("__"), order.get(m.kind, 2), short.lower())

        return sorted(found, key=key)

    def member(self, name: str, cls: type, attr: str, raw: Any, stub: ast.FunctionDef | None) -> Member | None:
        if isinstance(raw, property) or type(raw).__name__ == "getset_descriptor":
            if stub is not None:
                ret = annotation(stub_signature(stub).return_annotation)
            elif isinstance(raw, property) and raw.fget is not None:
                ret = annotation(inspect.signature(raw.fget).return_annotation)
            else:
                ret = ""
            return Member(name, "property", f"{name}: {ret}" if ret else name, parse_doc(raw.__doc__))
        if isinstance(raw, (staticmethod, classmethod)) or type(raw).__name__ in ("classmethod_descriptor",):
            kind = "staticmethod" if isinstance(raw, staticmethod) else "classmethod"
            bound = getattr(cls, attr)
            sig = stub_signature(stub) if stub is not None else self.signature(name, bound)
            drop = stub is not None and kind == "classmethod"
            return Member(name, kind, signature_text(name, sig, drop_first=drop), parse_doc(bound.__doc__))
        if inspect.isfunction(raw) or type(raw).__name__ in ("method_descriptor", "wrapper_descriptor", "builtin_function_or_method"):
            sig = stub_signature(stub) if stub is not None else self.signature(name, raw)
            return Member(name, "method", signature_text(name, sig, drop_first=True), parse_doc(raw.__doc__))
        if callable(raw) or type(raw).__name__ == "member_descriptor":
            return None
        return Member(name, "attribute", f"{name} = {default(raw)}", Doc())

    # -- the page ------------------------------------------------------------------------------
    def render(self) -> str:
        public = list(self.pkg.__all__)
        placed = [n for _, _, names in GROUPS for n in names]
        unplaced = sorted(set(public) - set(placed))
        unknown = sorted(set(placed) - set(public))
        twice = sorted({n for n in placed if placed.count(n) > 1})
        if unplaced or unknown or twice:
            raise GenerationError(
                "docs-tests/python_api.py GROUPS and insitubatch_rs.__all__ disagree: "
                f"not placed {unplaced}, not public {unknown}, placed twice {twice}"
            )
        out = [HEADER]
        for title, intro, names in GROUPS:
            entries = [self.entry(n, getattr(self.pkg, n)) for n in sorted(names, key=str.lower)]
            out.append(render_group(title, intro, entries))
        out.append(self.render_frameworks())
        out.append(self.render_source_modules())
        text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).rstrip("\n") + "\n"
        check_page(text)
        return text

    def render_frameworks(self) -> str:
        parts = []
        for sub in IMPORTED_SUBMODULES:
            mod = importlib.import_module(f"{PACKAGE}.{sub}")
            doc = parse_doc(mod.__doc__)
            lines = [f"## `{PACKAGE}.{sub}`", "", *paragraphs(doc), "Its names, the same objects as above:", ""]
            for n in sorted(mod.__all__, key=str.lower):
                if getattr(mod, n) is not getattr(self.pkg, n, None):
                    raise GenerationError(f"{PACKAGE}.{sub}.{n} is not {PACKAGE}.{n}: document it here")
                lines.append(f"- [`{n}`](#{anchor(n)}): {first_sentence(parse_doc(own_doc(getattr(mod, n))).summary)}")
            parts.append("\n".join(lines) + "\n")
        return "\n".join(parts)

    def render_source_modules(self) -> str:
        return "\n".join(render_source_module(sub, self.undocumented) for sub in FROM_SOURCE)


def base_name(b: type) -> str:
    if b.__module__ in ("builtins", "typing") or b.__module__.startswith(PACKAGE):
        return b.__name__
    if b is enum.Enum:
        return "Enum"
    return f"{b.__module__}.{b.__qualname__}"


def class_bases(cls: type) -> list[str]:
    bases = getattr(cls, "__orig_bases__", None) or cls.__bases__
    return [clean(annotation(b)) for b in bases if b is not object]


# -- widgets and other modules read from source ---------------------------------------------------


def render_source_module(sub: str, undocumented: list[str]) -> str:
    """A submodule documented from its source (``ast``): its docstring, its public classes and
    functions (signatures as written), a class's public methods, properties and class attributes."""
    path = SRC / f"{sub}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = parse_doc(ast.get_docstring(tree, clean=False))
    lines = [f"## `{PACKAGE}.{sub}`", "", *paragraphs(doc)]
    lines += render_raises(doc.raises)
    names = getattr_all(tree)
    entries = []
    for node in tree.body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)) or node.name.startswith("_"):
            continue
        if names is not None and node.name not in names:
            continue
        entries.append(source_entry(node, undocumented))
    lines += ["", "Its names:", "", *render_index(sorted(entries, key=lambda e: e.name.lower()))]
    text = "\n".join(lines) + "\n"
    for e in sorted(entries, key=lambda e: e.name.lower()):
        text += "\n" + render_entry(e)
    return text


def getattr_all(tree: ast.Module) -> set[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def source_entry(node: ast.ClassDef | ast.FunctionDef, undocumented: list[str]) -> Entry:
    doc = parse_doc(ast.get_docstring(node, clean=False))
    if doc.empty:
        undocumented.append(node.name)
    if isinstance(node, ast.FunctionDef):
        return Entry(node.name, "function", "", signature_text(node.name, stub_signature(node)), doc, [])
    init = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__init__"), None)
    code = signature_text(node.name, stub_signature(init), drop_first=True, returns=False) if init else f"{node.name}()"
    bases = [ast.unparse(b) for b in node.bases]
    members: list[Member] = []
    for m in node.body:
        if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
            decs = decorators(m)
            qual = f"{node.name}.{m.name}"
            mdoc = parse_doc(ast.get_docstring(m, clean=False))
            if mdoc.empty:
                undocumented.append(qual)
            if "property" in decs:
                ret = f": {ast.unparse(m.returns)}" if m.returns else ""
                members.append(Member(qual, "property", qual + ret, mdoc))
            else:
                kind = "staticmethod" if "staticmethod" in decs else "classmethod" if "classmethod" in decs else "method"
                members.append(Member(qual, kind, signature_text(qual, stub_signature(m), drop_first=kind != "staticmethod"), mdoc))
        elif isinstance(m, (ast.Assign, ast.AnnAssign)):
            targets = m.targets if isinstance(m, ast.Assign) else [m.target]
            for t in targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_") and m.value is not None:
                    qual = f"{node.name}.{t.id}"
                    value = ast.unparse(m.value)
                    kind = "traitlet, synced with the front end" if "sync=True" in value else "attribute"
                    members.append(Member(qual, kind, f"{qual} = {value}", Doc()))
    members.sort(key=lambda m: (m.kind in ("method", "classmethod", "staticmethod"), m.name.lower()))
    note = "documented from its source; bases: " + ", ".join(f"`{b}`" for b in bases) if bases else "documented from its source"
    return Entry(node.name, "class", note, code, doc, members)


# -- markdown -----------------------------------------------------------------------------------

HEADER = f"""# Python API reference

This page is generated from the package `insitubatch_rs` by
`{WRITE_COMMAND}` (run in the test venv, with the package built from this
tree), and CI fails when the page differs from what that command writes: edit the docstrings,
not this page. The names follow the API of the Python project insitubatch 0.2.0, so its code runs
after `import insitubatch_rs as insitubatch`; [Moving from insitubatch 0.2.0](../migration.md)
says, name by name, what is the same and what differs.

Sections come in the order below, names alphabetical within each; under a class, its properties,
then its methods, alphabetical. Each entry gives the kind, the signature with its defaults, the
docstring and, under **Raises**, the exceptions it documents. What is implemented in Rust takes
its signature from the type stub `_native.pyi`, which CI checks against the compiled extension.
`insitubatch_rs.widgets` needs anywidget, so it is documented from its source.
"""


def anchor(text: str) -> str:
    """The id mdBook gives a heading whose text is ``text``."""
    return "".join(c.lower() if c.isalnum() or c in "_-" else "-" if c.isspace() else "" for c in text)


def first_sentence(summary: str) -> str:
    return " ".join(summary.split())


def paragraphs(doc: Doc) -> list[str]:
    out = []
    if doc.summary:
        out += [doc.summary, ""]
    if doc.body:
        out += [doc.body, ""]
    return out


def render_raises(raises: list[tuple[str, str]]) -> list[str]:
    if not raises:
        return []
    return ["**Raises**", "", *(f"- `{name}`: {why}" if why else f"- `{name}`" for name, why in raises), ""]


def render_index(entries: Iterable[Entry]) -> list[str]:
    return [f"- [`{e.name}`](#{anchor(e.name)}) ({e.kind}): {first_sentence(e.doc.summary)}".rstrip(": ") for e in entries]


def render_group(title: str, intro: str, entries: list[Entry]) -> str:
    lines = [f"## {title}", "", intro, "", *render_index(entries), ""]
    text = "\n".join(lines)
    for e in entries:
        text += "\n" + render_entry(e)
    return text


def render_entry(e: Entry) -> str:
    lines = [f"### `{e.name}`", "", f"*{e.kind}*" + (f"; {e.note}" if e.note else ""), "", "```text", e.code, "```", ""]
    lines += paragraphs(e.doc) or ["*No docstring.*", ""]
    lines += render_raises(e.doc.raises)
    if e.see_also:
        lines += [e.see_also, ""]
    for m in e.members:
        lines += [f"#### `{m.name}`", "", f"*{m.kind}*", "", "```text", m.signature, "```", ""]
        if not m.kind.startswith(("attribute", "traitlet")):
            lines += paragraphs(m.doc) or ["*No docstring.*", ""]
        lines += render_raises(m.doc.raises)
    return "\n".join(lines).rstrip("\n") + "\n"


# An absolute path of one machine (docs-tests/test_snippets.py MACHINE_PATH, and any /home or
# site-packages path) and a memory address.
MACHINE_PATH = re.compile(r"(?<![\w$~.])/(?:root|home/[^/\s`]+|tmp|var/tmp|usr|opt)/|site-packages")
LEFT_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def check_page(text: str) -> None:
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        if MACHINE_PATH.search(line):
            problems.append(f"line {n}: an absolute path of this machine: {line.strip()}")
        if LEFT_ADDRESS.search(line):
            problems.append(f"line {n}: a memory address: {line.strip()}")
        if SHORTHAND.search(line):
            problems.append(f"line {n}: name the project insitubatch 0.2.0, not the anchor: {line.strip()}")
        if re.match(r"^ {4,}\S", line) and not in_fence(text, n):
            problems.append(f"line {n}: an indented line outside a fence (rustdoc would run it): {line}")
    fences = [line for line in text.splitlines() if line.startswith("```")]
    if any(f not in ("```text", "```") for f in fences):
        problems.append("a fence other than ```text (```python blocks would run under docs-tests/test_snippets.py)")
    if problems:
        raise GenerationError("the generated page has problems (fix the docstrings):\n" + "\n".join(problems))


def in_fence(text: str, line_no: int) -> bool:
    inside = False
    for n, line in enumerate(text.splitlines(), 1):
        if n == line_no:
            return inside
        if line.startswith("```"):
            inside = not inside
    return inside


# -- the installed package against this tree ------------------------------------------------------


def check_installed_matches_source(installed: Path) -> None:
    """The page documents the installed package: refuse one built from other sources."""
    if installed.resolve() == SRC.resolve():
        return

    def files(root: Path) -> dict[str, bytes]:
        return {
            p.name: p.read_bytes()
            for p in sorted(root.iterdir())
            if p.is_file() and (p.suffix in (".py", ".pyi") or p.name == "py.typed")
        }

    mine, theirs = files(SRC), files(installed)
    differ = sorted(n for n in set(mine) | set(theirs) if mine.get(n) != theirs.get(n))
    if differ:
        raise StaleInstall(
            f"the installed {PACKAGE} was not built from this tree's python-bindings/python (these differ: "
            f"{', '.join(differ)}): rebuild it into the test venv with scripts/test-python.sh, then rerun"
        )


class StaleInstall(GenerationError):
    """The installed package is not this tree's."""


# -- entry point --------------------------------------------------------------------------------


def render() -> str:
    return Generator().render()


def diff(committed: str, generated: str, limit: int = 60) -> str:
    lines = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), "committed", "generated", lineterm=""))
    more = f"\n... {len(lines) - limit} more diff lines" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write docs/reference/python-api.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when the committed page differs")
    args = ap.parse_args(argv)
    try:
        generator = Generator()
        text = generator.render()
    except GenerationError as e:
        print(f"python_api.py: {e}", file=sys.stderr)
        return 2
    rel = PAGE.relative_to(ROOT) if PAGE.is_relative_to(ROOT) else PAGE
    for name in generator.undocumented:
        print(f"python_api.py: warning: {name} has no docstring", file=sys.stderr)
    if args.write:
        PAGE.parent.mkdir(parents=True, exist_ok=True)
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != text:
            PAGE.write_text(text, encoding="utf-8")
            print(f"wrote {rel}")
        else:
            print(f"{rel} is current")
        return 0
    committed = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    if committed != text:
        print(
            f"{rel} differs from the package's API and docstrings: regenerate it with `{WRITE_COMMAND}` "
            f"(in the test venv) and commit it\n{diff(committed, text)}",
            file=sys.stderr,
        )
        return 1
    print(f"{rel} is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
