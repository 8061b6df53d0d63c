#!/usr/bin/env python3
"""Writes the apps chapter's tutorial apps (docs/apps.md) into folders, as a reader would make them.

    tutorial-apps.py DOC OUT

Each code block of DOC preceded by a line `<!-- the tutorial's files, ...: NAME/FILE ... -->` is
written to OUT/NAME/FILE. A Rust app's Cargo.toml is what `cargo new --lib NAME` and the
chapter's `cargo add` line write, then the block (its `[lib]` and `[profile.release]`), then an
empty `[workspace]` (the chapter says to add one inside another workspace). Its WIT goes to
OUT/NAME/wit/ as the chapter's `cp` says (the world 0.1, or 0.2 for the apps of its 0.2 section:
`hello2*`), and its Cargo.lock is plugins/planning's (the same dependencies), renamed: the build
is --locked. A Python or JavaScript app is built with the repository's wit/ (the same file).
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


def main(doc, out):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = open(doc).read().split("\n")
    files = {}
    adds = re.search(r"^cargo add (.+)$", "\n".join(lines), re.M)
    deps = [d.split("@") for d in adds.group(1).split()] if adds else []
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
            dep_lines = "".join(f'{d} = "{v}"\n' for d, v in deps)
            block = (f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2024"\n\n'
                     f"[dependencies]\n{dep_lines}\n{block}\n[workspace]\n")
            write(os.path.join(out, name, "Cargo.lock"),
                  lock.replace('name = "planning"', f'name = "{name}"', 1))
            wit = "wit/0.2" if name.startswith("hello2") else "wit"
            write(os.path.join(out, name, "wit/datanotes-app.wit"),
                  open(os.path.join(root, wit, "datanotes-app.wit")).read())
        write(os.path.join(out, name, rel), block)
    print(" ".join(sorted({t.partition("/")[0] for t in files})))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
