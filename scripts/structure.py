"""Print the package's structure picture: rooms, floors, arrows that run back up, largest pieces.

A *room* is a package folder (``async_plotter/channel/redis`` is one room) or a module at the
top level (``async_plotter/errors.py``). An import from a module in room A of a module in room B is an
arrow A -> B. Rooms are put on *floors*: a room stands one floor above the highest room it
imports, so ``floors`` is the height of the house. An arrow *runs back up* when it closes a
circle (B also reaches A through other arrows): then neither room can be understood or tested
without the other. The largest function and class (in lines) say where reading is hardest.

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
            names.append(prefix)
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


def picture(root: str) -> Dict[str, object]:
    """The figures of the structure picture for the package folder ``root``."""
    modules = _modules(root)
    packages = {name for name, path in modules.items() if path.endswith("__init__.py")}
    top = root.rstrip("/").split("/")[-1]
    graph: Dict[str, Set[str]] = {_room(m, packages, top): set() for m in modules if m != top}
    for module, path in modules.items():
        if module == top:
            continue
        source = _room(module, packages, top)
        for name in _imports(path, module, path.endswith("__init__.py")):
            if name.split(".")[0] != top or name == top:
                continue
            target = _room(name, packages, top)
            if target in graph and target != source and (name in modules or name.rsplit(".", 1)[0]
                                                         in modules or target == name):
                graph[source].add(target)
    back = sorted((a, b) for a, targets in graph.items() for b in targets if _reaches(graph, b, a))
    floors: Dict[str, int] = {}

    def floor(room: str, path: Tuple[str, ...] = ()) -> int:
        if room not in floors:
            below = [floor(t, path + (room, )) for t in graph[room] if t not in path + (room, )]
            floors[room] = 1 + max(below, default=0)
        return floors[room]

    for room in graph:
        floor(room)
    paths = list(modules.values())
    return {
        "rooms": len(graph),
        "modules": len(modules),
        "arrows": sum(len(t) for t in graph.values()),
        "floors": max(floors.values()),
        "back_arrows": back,
        "largest_function": _largest(paths, (ast.FunctionDef, ast.AsyncFunctionDef)),
        "largest_class": _largest(paths, ast.ClassDef),
        "lines": sum(1 for p in paths for _ in open(p, encoding="utf-8")),
        "floor_of": floors,
    }


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
    print("largest function: %d lines (%s)" % figures["largest_function"])
    print("largest class: %d lines (%s)" % figures["largest_class"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
