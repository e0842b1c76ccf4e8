"""Print the package's structure picture: rooms, floors, arrows that run back up, largest pieces.

A *room* is a package folder (``async_plotter/channel/redis`` is one room) or a module at the
top level (``async_plotter/errors.py``). An import from a module in room A of a module in room B is an
arrow A -> B. Rooms are put on *floors*: a room stands one floor above the highest room it
imports, so ``floors`` is the height of the house. An arrow *runs back up* when it closes a
circle (B also reaches A through other arrows): then neither room can be understood or tested
without the other. The same is counted between *modules* (a package's ``__init__`` is one), so
that a circle inside a room shows too. The largest function and class (in lines) say where
reading is hardest.

    python scripts/structure.py [package_dir]
"""
import ast
import os
import sys
from typing import Dict, List, Set, Tuple


def _modules(root: str) -> Dict[str, str]:
    """Dotted module name -> file path for every ``.py`` below ``root``."""
    base = os.path.dirname(os.path.abspath(root))
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


def _room(module: str, packages: Set[str], top: str) -> str:
    parts = module.split(".")
    while parts and ".".join(parts) not in packages:
        parts.pop()
    room = ".".join(parts)
    # The top level's modules are rooms of their own: errors.py and core.py are not one idea.
    return module.split(".")[0] + "." + module.split(
        ".")[1] if room == top and module != top else room


def _imports(path: str, module: str, is_package: bool) -> List[str]:
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor[:len(anchor) - node.level + (1 if is_package else 0)]
                prefix = ".".join(anchor + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # ``from a.b import c``: the module a.b.c where there is one, else a.b (see
            # ``_module_graph``), not both: a.b's __init__ is not read for c.
            names.extend(prefix + "." + alias.name for alias in node.names)
    return names


def _largest(paths: List[str], kind: type) -> Tuple[int, str]:
    best = (0, "")
    for path in paths:
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, kind):
                lines = node.end_lineno - node.lineno + 1
                best = max(best, (lines, "%s:%s" % (os.path.relpath(path), node.name)))
    return best


def _reaches(graph: Dict[str, Set[str]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        here = todo.pop()
        if here == goal:
            return True
        if here not in seen:
            seen.add(here)
            todo.extend(graph.get(here, ()))
    return False


def _module_graph(modules: Dict[str, str], top: str) -> Dict[str, Set[str]]:
    """Module -> the modules of ``top`` it imports (``from a.b import c`` names the module
    ``a.b.c`` where there is one, else ``a.b``)."""
    graph: Dict[str, Set[str]] = {m: set() for m in modules if m != top}
    for module in graph:
        path = modules[module]
        for name in _imports(path, module, path.endswith("__init__.py")):
            while name not in modules and "." in name:
                name = name.rsplit(".", 1)[0]
            if name in graph and name != module:
                graph[module].add(name)
    return graph


def _back_arrows(graph: Dict[str, Set[str]]) -> List[Tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if _reaches(graph, b, a))


def picture(root: str) -> Dict[str, object]:
    """The figures of the structure picture for the package folder ``root``."""
    modules = _modules(root)
    packages = {name for name, path in modules.items() if path.endswith("__init__.py")}
    top = root.rstrip("/").split("/")[-1]
    module_graph = _module_graph(modules, top)
    graph: Dict[str, Set[str]] = {_room(m, packages, top): set() for m in module_graph}
    for module, targets in module_graph.items():
        for target in targets:
            graph[_room(module, packages, top)].add(_room(target, packages, top))
    for room, targets in graph.items():
        targets.discard(room)
    floors: Dict[str, int] = {}

    def floor(room: str, path: Tuple[str, ...] = ()) -> int:
        if room not in floors:
            below = [
                floor(t, path + (room, )) for t in sorted(graph[room]) if t not in path + (room, )
            ]
            floors[room] = 1 + max(below, default=0)
        return floors[room]

    for room in sorted(graph):  # sorted: the floors of a circle's rooms do not change per run
        floor(room)
    paths = list(modules.values())
    module_back = _back_arrows(module_graph)
    within = [(a, b) for a, b in module_back if _room(a, packages, top) == _room(b, packages, top)]
    return dict(rooms=len(graph),
                modules=len(modules),
                arrows=sum(len(t) for t in graph.values()),
                module_arrows=sum(len(t) for t in module_graph.values()),
                floors=max(floors.values()),
                back_arrows=_back_arrows(graph),
                module_back_arrows=module_back,
                module_back_arrows_within=within,
                largest_function=_largest(paths, (ast.FunctionDef, ast.AsyncFunctionDef)),
                largest_class=_largest(paths, ast.ClassDef),
                lines=sum(1 for p in paths for _ in open(p, encoding="utf-8")),
                floor_of=floors)


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else "async_plotter"
    figures = picture(root)
    for room, level in sorted(figures["floor_of"].items(), key=lambda item: (item[1], item[0])):
        print("floor %d  %s" % (level, room))
    print("rooms %(rooms)d, modules %(modules)d, arrows %(arrows)d, floors %(floors)d, "
          "lines %(lines)d" % figures)
    print("arrows that run back up: %d" % len(figures["back_arrows"]))
    for a, b in figures["back_arrows"]:
        print("  %s -> %s" % (a, b))
    within = figures["module_back_arrows_within"]
    print("module arrows %d; module arrows that run back up: %d (%d within a room)" %
          (figures["module_arrows"], len(figures["module_back_arrows"]), len(within)))
    for a, b in figures["module_back_arrows"]:
        print("  %s -> %s%s" % (a, b, "  (within a room)" if (a, b) in within else ""))
    print("largest function: %d lines (%s)" % figures["largest_function"])
    print("largest class: %d lines (%s)" % figures["largest_class"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
