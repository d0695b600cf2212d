#!/usr/bin/env python3
"""No include cycles among the daemon's files (issue 17, point 2).

The build already refuses an include against the folder order (daemon/CMakeLists.txt); this
checks what it cannot: that no module (a header with its source file) reaches itself again
through the modules it includes, inside a folder or across folders. Before issue 17,
allreduce_algorithms included counters, which reached allreduce_algorithms again through
config, engine, job and transport. Prints every cycle found and exits 1, or exits 0.
Usage: include_cycles.py DAEMON_DIR
"""
import os
import re
import sys

root = sys.argv[1]
include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
files = {}
for folder, _, names in os.walk(root):
    for name in names:
        if name.endswith(('.hpp', '.h', '.cpp')):
            path = os.path.join(folder, name)
            files[os.path.relpath(path, root)] = path


def resolve(source, target):
    here = os.path.normpath(os.path.join(os.path.dirname(source), target))
    if here in files:
        return here
    return target if target in files else None


def module(rel):
    return os.path.splitext(rel)[0]


graph = {}
for rel, path in files.items():
    with open(path, encoding='utf-8') as f:
        text = f.read()
    edges = graph.setdefault(module(rel), [])
    for r in (resolve(rel, t) for t in include.findall(text)):
        if r is not None and module(r) != module(rel) and module(r) not in edges:
            edges.append(module(r))

cycles = []
state = {}


def visit(node, stack):
    state[node] = 1
    stack.append(node)
    for nxt in graph.get(node, []):
        if state.get(nxt) == 1:
            cycles.append(stack[stack.index(nxt):] + [nxt])
        elif nxt not in state:
            visit(nxt, stack)
    stack.pop()
    state[node] = 2


for node in sorted(graph):
    if node not in state:
        visit(node, [])
for cycle in cycles:
    print('include cycle: ' + ' -> '.join(cycle))
print(f'{len(graph)} daemon modules, {sum(len(v) for v in graph.values())} dependencies, '
      f'{len(cycles)} cycles')
sys.exit(1 if cycles else 0)
