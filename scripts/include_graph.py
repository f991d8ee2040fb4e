#!/usr/bin/env python3
"""The include graph of kdist's headers: how deep it is and which includes point up a layer.

    python3 scripts/include_graph.py [INCLUDE_DIR=include]

Depth: the longest chain of #include <kdist/...> between library headers (a header with no kdist
include is level 1). Upward includes: a header including one of a higher layer (the order of
docs/design.md: core, parallel|ops, tensor, strategy, nn, io); in a flat tree (no layer folders)
none can be counted, which is why the layer rule is a test now (tests/layering/check_layers.cmake).
"""
import os
import re
import sys
from functools import lru_cache

root = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "include", "kdist")
rank = {"core": 0, "parallel": 1, "ops": 1, "tensor": 2, "strategy": 3, "nn": 4, "io": 5}
pattern = re.compile(r'^\s*#\s*include\s*<kdist/([^>]+)>', re.M)
graph = {}
for folder, _, files in os.walk(root):
    for name in files:
        if name.endswith(".hpp"):
            path = os.path.relpath(os.path.join(folder, name), root)
            with open(os.path.join(root, path)) as f:
                graph[path] = [t for t in pattern.findall(f.read())]


@lru_cache(maxsize=None)
def depth(h):
    return 1 + max((depth(t) for t in graph[h] if t in graph), default=0)


def chain(h):
    nxt = [t for t in graph[h] if t in graph]
    return [h] + (chain(max(nxt, key=depth)) if nxt else [])


library = [h for h in graph if h != "kdist.hpp"]
top = max(library, key=depth)
upward = [(h, t) for h in graph for t in graph[h]
          if h.split("/")[0] in rank and t.split("/")[0] in rank
          and rank[t.split("/")[0]] > rank[h.split("/")[0]]]
print(f"headers: {len(graph)}, kdist includes: {sum(len(v) for v in graph.values())}")
print(f"depth (library headers, kdist.hpp aside): {depth(top)}: " + " -> ".join(chain(top)))
print(f"includes pointing up a layer: {len(upward)}" +
      "".join(f"\n  {h} -> {t}" for h, t in upward))
