#!/usr/bin/env python3
"""The unity build's one hazard, checked: no file's private names reach another file.

tools/test.sh builds with CMAKE_UNITY_BUILD, which compiles a target's sources as a few batches
(BUILD/**/Unity/unity_*.cxx, each including several .cpp files). Every file's anonymous
namespace then becomes one namespace per batch, so a helper of one file can collide with, or
silently win overload resolution against, a name another file uses: a test could pass against
the wrong reference. For every batch, this fails when a name that one file declares in an
anonymous namespace (or #defines) is declared or used in another file of the batch, or when a
file that is not the batch's last has a namespace-scope `using namespace`.

  unity_names.py BUILD_DIR
"""
import pathlib
import re
import sys

KEYWORDS = {
    "const", "constexpr", "inline", "static", "struct", "class", "enum", "union", "using",
    "template", "typename", "void", "auto", "unsigned", "signed", "int", "char", "bool",
    "double", "float", "long", "short", "size_t", "thread_local", "volatile", "operator",
    "final", "override", "noexcept", "public", "private", "protected", "return", "namespace",
}


def code_only(text):
    """The text without comments, string and character literals (their lengths kept)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def declared_name(statement):
    """The name a namespace-scope declaration introduces, or None."""
    statement = re.sub(r"^template\s*<[^{;]*?>\s*", "", statement.strip())
    if statement.startswith("using namespace"):
        return None  # checked on its own
    m = re.match(r"(?:enum\s+class|enum|struct|class|union)\s+(\w+)", statement)
    if m:
        return m.group(1)
    m = re.match(r"using\s+(\w+)\s*=", statement)
    if m:
        return m.group(1)
    m = re.match(r"using\s+[\w:]*::(\w+)\s*;", statement)
    if m:
        return m.group(1)
    head = re.split(r"[(=\[{;]", statement, maxsplit=1)[0]
    head = re.sub(r"<[^<>]*(?:<[^<>]*>[^<>]*)*>", " ", head)  # template arguments
    names = [n for n in re.findall(r"[A-Za-z_]\w*", head) if n not in KEYWORDS]
    if not names or names[-1].isupper():  # macros (TEST, INSTANTIATE_TEST_SUITE_P)
        return None
    return names[-1]


def private_names(code):
    """Names declared at the top level of the file's anonymous namespaces, and #defines."""
    names = set(re.findall(r"^\s*#\s*define\s+(\w+)", code, re.M))
    depth, anon_depth, statement = 0, None, ""
    for line in code.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if anon_depth is None and re.match(r"\s*namespace\s*\{", line):
            anon_depth = depth + 1
        elif anon_depth is not None and depth == anon_depth:
            statement += " " + line
            # A statement at the namespace's top level ends at its first ';' or '{'.
            if re.search(r"[;{]", line):
                name = declared_name(statement)
                if name:
                    names.add(name)
                statement = ""
        for ch in line:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if anon_depth is not None and depth < anon_depth:
                    anon_depth = None
    return names


def main():
    build = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "build")
    # Only the batches the build compiles: a reconfigured tree keeps stale ones.
    rules = "".join(p.read_text(errors="replace")
                    for p in [build / "build.ninja", *build.glob("**/build.make")] if p.exists())
    batches = sorted(b for b in build.glob("**/Unity/unity_*.cxx")
                     if str(b.relative_to(build)) in rules or str(b) in rules)
    problems, checked = [], 0
    for batch in batches:
        files = re.findall(r'^#include "([^"]+)"', batch.read_text(), re.M)
        if len(files) < 2:
            continue
        checked += 1
        codes = {f: code_only(pathlib.Path(f).read_text()) for f in files}
        # Unqualified uses only: `x::name`, `a.name` and `p->name` do not look in the batch's
        # anonymous namespace.
        tokens = {f: set(re.findall(r"(?<![\w:.>])(?<!->)[A-Za-z_]\w*", c)) for f, c in codes.items()}
        using = {f: set(re.findall(r"^\s*using\s+([\w:]+::\w+)\s*;", c, re.M))
                 for f, c in codes.items()}
        for i, f in enumerate(files):
            for name in sorted(private_names(codes[f])):
                for other in files:
                    # The same using-declaration in both files names the same entity.
                    same = {u for u in using[f] if u.endswith("::" + name)} & using[other]
                    if other != f and name in tokens[other] and not same:
                        problems.append(f"{batch.name}: '{name}', private to {f}, also in {other}")
            if i + 1 < len(files):
                for m in re.finditer(r"^using\s+namespace\s+([\w:]+)\s*;", codes[f], re.M):
                    if not m.group(1).endswith("_literals"):
                        problems.append(f"{batch.name}: {f} has 'using namespace {m.group(1)}' "
                                        f"at namespace scope, which reaches {files[i + 1]}")
    for p in problems:
        print(p)
    print(f"{len(batches)} unity sources, {checked} with several files, {len(problems)} problems")
    if not batches:
        print("no unity sources: configure with -DCMAKE_UNITY_BUILD=ON")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
