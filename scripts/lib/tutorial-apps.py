#!/usr/bin/env python3
"""Writes the apps chapter's tutorial apps (docs/apps.md) into folders, as a reader would make them.

    tutorial-apps.py DOC OUT

Each code block of DOC preceded by a line `<!-- the tutorial's files, ...: NAME/FILE ... -->` is
written to OUT/NAME/FILE. A Rust app's Cargo.toml is what `cargo new --lib NAME` and the
`cargo add` line after it write (the chapter's first one for an app it makes no folder for),
then the block (its `[lib]` and `[profile.release]`), then an empty `[workspace]` (the chapter
says to add one inside another workspace). An app of our world gets its WIT in OUT/NAME/wit/ as
the chapter's `cp` says (the world 0.1, or 0.2 for the apps of its 0.2 section: `hello2*`); a
typed component's WIT is a block of its own. A Rust app's Cargo.lock is plugins/planning's (the
same versions) cut down to what its dependencies reach, and renamed: the build is --locked.
A Python or JavaScript app of our world is built with the repository's wit/ (the same file).
A file whose content is unchanged is not written again (its time stays, for cargo).
"""
import os
import re
import sys

MARK = re.compile(r"^<!-- the tutorial's files, [^:]*: (.+?) -->$")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(text)


def packages(lock):
    """The `[[package]]` blocks of a Cargo.lock: (name, version, dependency names, text)."""
    out = []
    for text in lock.split("\n[[package]]\n")[1:]:
        name = re.search(r'^name = "(.+)"$', text, re.M).group(1)
        version = re.search(r'^version = "(.+)"$', text, re.M).group(1)
        deps = re.findall(r'^ "([^"]+)",$', text, re.M)
        out.append((name, version, deps, text))
    return out


def lock_for(lock, name, deps):
    """plugins/planning's lock for a crate `name` with direct dependencies `deps` (names): the
    packages they reach, the root renamed."""
    head, _, _ = lock.partition("\n[[package]]\n")
    pkgs = packages(lock)
    want = {d.replace("_", "-") for d in deps}

    def find(spec):
        n, _, v = spec.partition(" ")
        return [p for p in pkgs if p[0] == n and (not v or p[1] == v.split(" ")[0])]

    direct = [p for p in pkgs if p[0].replace("_", "-") in want]
    seen, todo = set(), list(direct)
    while todo:
        p = todo.pop()
        if (p[0], p[1]) in seen:
            continue
        seen.add((p[0], p[1]))
        for d in p[2]:
            todo.extend(find(d))
    root = next(p for p in pkgs if "source = " not in p[3])
    root_text = root[3].replace(f'name = "{root[0]}"', f'name = "{name}"', 1)
    root_text = re.sub(r"dependencies = \[\n(?: \"[^\"]+\",\n)*\]",
                       "dependencies = [\n" + "".join(f' "{d}",\n' for d in sorted(
                           p[0] for p in direct)) + "]",
                       root_text)
    blocks = [root_text if p is root else p[3] for p in pkgs if p is root or (p[0], p[1]) in seen]
    blocks.sort(key=lambda t: re.search(r'^name = "(.+)"$', t, re.M).group(1))
    return head + "".join("\n[[package]]\n" + b for b in blocks)


def main(doc, out):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = open(doc).read().split("\n")
    files = {}
    # Each app's dependencies: the `cargo add` line after its `cargo new --lib NAME`.
    adds = re.findall(r"^cargo new --lib (\S+).*\ncargo add (.+)$", "\n".join(lines), re.M)
    deps_of = {n: [d.split("@") for d in a.split()] for n, a in adds}
    first = [d.split("@") for d in adds[0][1].split()] if adds else []
    i = 0
    while i < len(lines):
        m = MARK.match(lines[i])
        if not m:
            i += 1
            continue
        assert lines[i + 1].startswith("```"), f"{doc}:{i + 2}: a code block must follow the mark"
        end = i + 2
        while not lines[end].startswith("```"):
            end += 1
        block = "\n".join(lines[i + 2:end]) + "\n"
        for target in m.group(1).split():
            files[target] = block
        i = end + 1
    if not files:
        sys.exit(f"tutorial-apps: no marked code block in {doc}")
    lock = open(os.path.join(root, "plugins/planning/Cargo.lock")).read()
    for target, block in sorted(files.items()):
        name, _, rel = target.partition("/")
        if rel == "Cargo.toml":
            deps = deps_of.get(name, first)
            dep_lines = "".join(f'{d} = "{v}"\n' for d, v in deps)
            block = (f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2024"\n\n'
                     f"[dependencies]\n{dep_lines}\n{block}\n[workspace]\n")
            write(os.path.join(out, name, "Cargo.lock"), lock_for(lock, name, [d for d, _ in deps]))
            # An app of our world: its WIT as the chapter's `cp` says.
            if not any(t.startswith(f"{name}/wit/") for t in files):
                wit = "wit/0.2" if name.startswith("hello2") else "wit"
                write(os.path.join(out, name, "wit/datanotes-app.wit"),
                      open(os.path.join(root, wit, "datanotes-app.wit")).read())
        write(os.path.join(out, name, rel), block)
    print(" ".join(sorted({t.partition("/")[0] for t in files})))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
