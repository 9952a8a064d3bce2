"""PigeonJS's TypeScript declarations (`Clients/PigeonJS/src/pigeon.d.ts`, served at /sdk/pigeon.d.ts) against the
modules: the TypeScript compiler (Debian's node-typescript) derives declarations from the modules' JSDoc, and the
hand-written file must export the same names and declare every public member of `PigeonClient` and `PigeonError` the
modules have; it must also compile on its own under `--strict`. A call added to the SDK without its type fails here.

The hand-written file stays the one served: it types what the JSDoc leaves `any` (the records, the events).
"""

import os
import re
import subprocess
import tempfile

from pigeonweb import check, main

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SOURCES = os.path.join(ROOT, "Clients", "PigeonJS", "src")
DECLARATIONS = os.path.join(SOURCES, "pigeon.d.ts")


def tsc(*arguments):
    done = subprocess.run(["tsc", *arguments], capture_output=True, text=True, timeout=300)
    check(done.returncode == 0, f"tsc {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}")


def exported_names(text):
    """The names a declaration file exports: its own declarations and the names it re-exports."""
    names = set(re.findall(r"^export (?:declare )?(?:const|function|class|type|interface) (\w+)", text, re.M))
    for group in re.findall(r"^export \{([^}]*)\} from", text, re.M):
        names |= {name.strip() for name in group.split(",") if name.strip()}
    return names


def class_members(text, name):
    """The public members (methods, getters, properties, static ones) a declaration file gives class `name`."""
    match = re.search(r"^export (?:declare )?class " + name + r"\b[^{]*\{(.*?)^\}", text, re.M | re.S)
    check(match is not None, f"no class {name} declared")
    body = re.sub(r"/\*.*?\*/", "", match.group(1), flags=re.S)
    members = set()
    depth = 0
    for line in body.splitlines():
        if depth == 0:
            found = re.match(r"\s*(?:static\s+)?(?:readonly\s+)?(?:get\s+|set\s+)?(\w+)\s*[(:<?]", line)
            if found and found.group(1) not in ("constructor", "private"):
                members.add(found.group(1))
        depth += line.count("{") - line.count("}") + line.count("(") - line.count(")")
    return members


def test_the_declarations_match_the_modules():
    with tempfile.TemporaryDirectory(prefix="pigeonjs-types-") as out:
        tsc("--declaration", "--allowJs", "--emitDeclarationOnly", "--target", "es2022", "--module", "es2022",
            "--outDir", out, os.path.join(SOURCES, "pigeon.js"))
        with open(os.path.join(out, "pigeon.d.ts"), encoding="utf-8") as file:
            derived = file.read()
        with open(os.path.join(out, "client.d.ts"), encoding="utf-8") as file:
            derived_client = file.read()
        with open(os.path.join(out, "errors.d.ts"), encoding="utf-8") as file:
            derived_errors = file.read()
    with open(DECLARATIONS, encoding="utf-8") as file:
        written = file.read()
    check(exported_names(derived) <= exported_names(written),
          f"exported by the modules, not declared: {sorted(exported_names(derived) - exported_names(written))}")
    for name, source in (("PigeonClient", derived_client), ("PigeonError", derived_errors)):
        missing = class_members(source, name) - class_members(written, name)
        check(not missing, f"{name} members the modules have and pigeon.d.ts does not declare: {sorted(missing)}")


def test_the_declarations_compile_on_their_own():
    with tempfile.TemporaryDirectory(prefix="pigeonjs-types-") as out:
        consumer = os.path.join(out, "app.ts")
        with open(consumer, "w", encoding="utf-8") as file:
            file.write('import { PigeonClient, PigeonError, applyEvidence, STATUSES, VERSION } from "./pigeon";\n'
                       'const client = new PigeonClient({ server: "https://chat.example.com", token: "t", database: "d" });\n'
                       'const next: string | null = applyEvidence("pending", "dispatched");\n'
                       'export const used = [client.state, next, STATUSES.length, VERSION, PigeonError.name];\n')
        with open(DECLARATIONS, encoding="utf-8") as source, open(os.path.join(out, "pigeon.d.ts"), "w", encoding="utf-8") as copy:
            copy.write(source.read())
        tsc("--noEmit", "--strict", "--target", "es2022", "--module", "es2022", "--lib", "es2022,dom", consumer)


if __name__ == "__main__":
    main([test_the_declarations_match_the_modules, test_the_declarations_compile_on_their_own])
