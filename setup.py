"""Build: compile the hot path with mypyc where possible, else install pure Python.

Everything else is declared in pyproject.toml. The modules compiled are listed once,
in ``src/loopwatch/_build.py`` (``COMPILED``), and read from there. The compiled and
pure builds come from the same sources and give the same results.

* ``LOOPWATCH_PURE=1`` skips compilation (a pure-Python install);
* no mypyc, no working C compiler, or a failed compilation: a warning, and the
  pure-Python install goes on (the package never fails to install for lack of a
  compiler);
* ``LOOPWATCH_REQUIRE_COMPILED=1`` turns that fallback into an error (wheel builds).

mypyc drops docstrings (a compiled function's ``__doc__`` holds only its text
signature), so ``help(Guard)`` and anything else that introspects the compiled build
would show bare names: :func:`_add_docstrings` puts each compiled class's, method's
and function's docstring, read from its source, back beside its signature.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def compiled_modules() -> list[str]:
    """``COMPILED`` from src/loopwatch/_build.py, without importing the package."""
    tree = ast.parse((HERE / "src" / "loopwatch" / "_build.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "COMPILED":
            value: Any = ast.literal_eval(node.value)
            return list(value)
    raise RuntimeError("COMPILED not found in src/loopwatch/_build.py")


def _warn(message: str) -> None:
    if _flag("LOOPWATCH_REQUIRE_COMPILED"):
        raise SystemExit(f"loopwatch: {message} (LOOPWATCH_REQUIRE_COMPILED is set)")
    print(f"loopwatch: {message}; installing the pure-Python build", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when the compilation fails, leaving
    no half-built extension behind (a shim without its shared library would fail
    to import)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers...
            _warn(f"compiling the core failed ({type(exc).__name__}: {exc})")
            self._remove_outputs()
            self.extensions = []

    def _remove_outputs(self) -> None:
        # An in-place (editable) build must not leave an older compiled module
        # beside the source it would shadow; a wheel build leaves the tree alone.
        bases = [self.build_lib]
        if self.inplace or getattr(self, "editable_mode", False):
            bases.append(str(HERE / "src"))
        for ext in self.extensions:
            for base in bases:
                path = Path(base) / self.get_ext_filename(ext.name)
                if path.exists():
                    path.unlink()

    def get_outputs(self) -> list[str]:
        return super().get_outputs() if self.extensions else []


def _docstrings(modules: list[str]) -> dict[tuple[str, str | None, str | None], str]:
    """``(module, class or None, function or None) -> docstring`` for the compiled
    sources; an overloaded function's docstring is its implementation's."""
    found: dict[tuple[str, str | None, str | None], str] = {}

    def functions(module: str, owner: str | None, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    found[(module, owner, node.name)] = doc

    for module in modules:
        path = HERE / "src" / Path(*module.split(".")).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions(module, None, tree.body)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                doc = ast.get_docstring(node)
                if doc:
                    found[(module, node.name, None)] = doc
                functions(module, node.name, node.body)
    return found


_C_DOC = r'(?P<doc>"(?:[^"\\]|\\.)*"|NULL)\)'  # a C string literal, or NULL
_C_METHOD = re.compile(
    r"(\(PyCFunction\)CPyPy_(?P<cname>\w+),\s*[A-Z_ |]+,\s*PyDoc_STR\()" + _C_DOC
)
_C_TYPE = re.compile(
    r"(static PyTypeObject CPyType_(?P<cname>\w+)_template_ = \{[^}]*?\.tp_doc = PyDoc_STR\()"
    + _C_DOC
)


# A property: ``{"name", (getter)<module>___<Class>_get_name, setter, doc, closure}``.
_C_PROPERTY = re.compile(
    r'(\{"(?P<name>\w+)",\s*\(getter\)(?P<owner>\w+?)_get_(?P=name),\s*'
    r"(?:\(setter\)\w+|NULL),\s*)NULL(?=,\s*NULL\})"
)
# A class that is not native (an Enum, a dataclass) gets a filler docstring, set in its
# namespace right after a traceback entry that gives the class's source line.
_C_FILLER = re.compile(
    r'CPy_AddTraceback\("(?P<path>[^"]+)", "<module>", (?P<line>\d+), [^;]*;'
    r"(?:\s*goto \w+;)?\s*\}?\s*"
    r"(?P<var>cpy_r_r\d+) = CPyStatics\[\d+\]; /\* 'mypyc filler docstring' \*/"
)


def _class_lines(modules: list[str]) -> dict[tuple[str, int], str]:
    """``(source path as mypyc writes it, a line of the class's head) -> docstring``."""
    found: dict[tuple[str, int], str] = {}
    for module in modules:
        path = Path("src", *module.split(".")).with_suffix(".py")
        tree = ast.parse((HERE / path).read_text(encoding="utf-8"))
        for node in tree.body:
            doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef) else None
            if doc:
                for line in (node.lineno, *(d.lineno for d in node.decorator_list)):
                    found[(path.as_posix(), line)] = doc
    return found


def _c_string(text: str) -> str:
    """A C string literal of ``text`` in UTF-8 (what CPython reads ``ml_doc`` and
    ``tp_doc`` as); bytes outside printable ASCII as 3-digit octal escapes."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _add_docstrings(extensions: list[Any], modules: list[str]) -> None:
    """Write each docstring after the text signature mypyc writes in the generated C.

    mypyc drops docstrings: a compiled function's ``__doc__`` is only its text
    signature (``name(sig)\\n--\\n\\n``), so ``help(Guard)`` would show bare names.
    CPython reads a docstring that follows that signature, so the docstrings (read
    from the sources) are put there, in the C that mypycify just generated and
    build_ext is about to compile. A method is found by its C wrapper's name
    (``CPyPy_<module>___<Class>___<method>``), a class by its type template's, a
    property by its getter's, and a class that is not native (an Enum) by the source
    line of the filler docstring mypyc gives it. Nothing else in the C changes; what
    is not found is left as it was.
    """
    # mypyc names a module by the shortest tail of its dotted name that is unique
    # (``repeat``, but ``detectors___base`` beside ``stores___base``): every tail is
    # a key, and a tail that two modules share is dropped as ambiguous.
    docs: dict[str, str | None] = {}
    for (module, cls, fn), doc in _docstrings(modules).items():
        parts = module.split(".")
        for start in range(len(parts)):
            key = "___".join(p for p in ("___".join(parts[start:]), cls, fn) if p)
            docs[key] = doc if docs.get(key, doc) == doc else None

    def with_doc(match: re.Match[str]) -> str:
        doc = docs.get(match["cname"])
        if doc is None:
            return match[0]
        # the signature mypyc wrote (ASCII), or none it could write
        head = "" if match["doc"] == "NULL" else ast.literal_eval(match["doc"])
        return f"{match[1]}{_c_string(head + doc)})"

    heads = _class_lines(modules)

    def prop(match: re.Match[str]) -> str:
        doc = docs.get(f"{match['owner']}___{match['name']}")
        return match[0] if doc is None else f"{match[1]}{_c_string(doc)}"

    def filler(match: re.Match[str]) -> str:
        doc = heads.get((match["path"], int(match["line"])))
        if doc is None:
            return match[0]
        head = match[0][: match.start("var") - match.start()]
        # a new reference, kept by the class for the life of the process
        return f"{head}{match['var']} = PyUnicode_FromString({_c_string(doc)});"

    for ext in extensions:
        for source in ext.sources:
            path = Path(source)
            if path.suffix != ".c" or not path.is_file():
                continue
            code = path.read_text(encoding="utf-8")
            done = _C_METHOD.sub(with_doc, code)
            done = _C_PROPERTY.sub(prop, _C_TYPE.sub(with_doc, done))
            done = _C_FILLER.sub(filler, done)
            if done != code:
                path.write_text(done, encoding="utf-8")


def ext_modules() -> list[Any]:
    if _flag("LOOPWATCH_PURE"):
        print("loopwatch: LOOPWATCH_PURE is set; installing the pure-Python build", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not available")
        return []
    modules = compiled_modules()
    paths = [str(Path("src", *module.split(".")).with_suffix(".py")) for module in modules]
    try:
        extensions = list(mypycify(paths, opt_level="3", debug_level="0", group_name="loopwatch"))
    except BaseException as exc:  # mypyc reports type errors with SystemExit
        _warn(f"mypyc could not compile the core ({type(exc).__name__}: {exc})")
        return []
    _add_docstrings(extensions, modules)
    return extensions


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
