"""The command blocks of README.md and docs/*.md run as written, so that documentation that drifts
from the program fails.

The rule (docs/README.md says it to writers):

- A command block is a fenced block (three or more backticks or tildes, at the start of a line
  or indented in a list item) whose language is `sh`, `bash` or `console`. Any other language
  (`json`, `text`, none) is not a command and is never run.
- `sh` and `bash` blocks are scripts, run whole. In a `console` block, the lines that start with
  `$ ` are the commands (the prompt removed; a line ending in a backslash continues on the next);
  the other lines are output, shown to the reader and not compared.
- Each file's blocks run in order, each as its own `bash -e -o pipefail` process, in one scratch
  directory per file that holds a copy of the repository's examples/: files made by one block are
  there for the next, shell variables are not. A block fails on the first command that fails.
  What a block starts in the background and does not wait for is killed when the block ends.
- `hippo` and `hippo-worker` come from $HIPPO_DOC_BIN (put first on PATH), the Python package
  from $HIPPO_DOC_PYTHONPATH (PYTHONPATH). Nothing else of a build tree is assumed.
- A block that cannot run here (a GPU, Slurm, apt-get, scripts/test itself, a process that runs
  until it is stopped) is preceded by `<!-- docs-test: skip REASON -->` on the line before its
  fence. A skipped block is still read: every `hippo SUBCOMMAND` in it must be one that
  `hippo --help` lists, and every `--option` written after it one that `hippo SUBCOMMAND --help`
  or `hippo --help` lists. The skipped blocks and their reasons are reported as pytest skips
  (`-rs`).
"""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_LANGUAGES = {"sh", "bash", "console"}
FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^`\s]*)")
SKIP = re.compile(r"^[ \t]*<!--\s*docs-test:\s*skip\b(.*?)-->\s*$")
BLOCK_TIMEOUT_S = int(os.environ.get("HIPPO_DOC_BLOCK_TIMEOUT", "300"))


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    script: str  # what bash runs
    skip: str | None = None  # the reason, when the block is skipped
    commands: list = field(default_factory=list)  # the command lines, for the skip check

    @property
    def where(self):
        try:
            name = self.path.relative_to(REPO)
        except ValueError:
            name = self.path
        return f"{name}:{self.line}"


class DocError(Exception):
    """A document that the runner cannot read, or a block that failed."""


def console_commands(lines):
    """The commands of a console transcript: `$ ` lines, with their backslash continuations."""
    commands, current = [], None
    for text in lines:
        if current is not None:
            current.append(text)
            if not text.endswith("\\"):
                commands.append("\n".join(current))
                current = None
        elif text.startswith("$ "):
            current = [text[2:]]
            if not text.endswith("\\"):
                commands.append(current[0])
                current = None
    if current is not None:
        commands.append("\n".join(current))
    return commands


def extract_blocks(path):
    """Every command block of a markdown file, in order; DocError on an unclosed fence or a skip
    marker that gives no reason or stands before no command block."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    blocks, i, pending_skip = [], 0, None
    while i < len(lines):
        m = SKIP.match(lines[i])
        if m:
            reason = m.group(1).strip()
            if not reason:
                raise DocError(f"{path}:{i + 1}: a docs-test skip marker must give a reason")
            pending_skip = (i + 1, reason)
            i += 1
            continue
        m = FENCE.match(lines[i])
        if not m:
            if pending_skip and lines[i].strip():
                raise DocError(f"{path}:{pending_skip[0]}: a skip marker must stand on the line "
                               "before a command block's fence")
            i += 1
            continue
        indent, fence, language, start = len(m.group(1)), m.group(2), m.group(3).lower(), i
        body = []
        i += 1
        closing = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{%d,}[ \t]*$" % len(fence))
        while i < len(lines) and not closing.match(lines[i]):
            # A block in a list item is indented: its lines lose that indentation.
            text = lines[i]
            body.append(text[min(indent, len(text) - len(text.lstrip(" \t"))):])
            i += 1
        if i == len(lines):
            raise DocError(f"{path}:{start + 1}: the block opened here is never closed")
        i += 1  # the closing fence
        if language not in RUN_LANGUAGES:
            if pending_skip:
                raise DocError(f"{path}:{pending_skip[0]}: a skip marker before a block that is "
                               f"not a command ({language or 'no language'})")
            continue
        commands = console_commands(body) if language == "console" else body_commands(body)
        script = "\n".join(commands) if language == "console" else "\n".join(body)
        blocks.append(Block(Path(path), start + 1, language, script + "\n",
                            pending_skip[1] if pending_skip else None, commands))
        pending_skip = None
    if pending_skip:
        raise DocError(f"{path}:{pending_skip[0]}: a skip marker before no block")
    return blocks


def body_commands(body):
    """The command lines of a script, continuations joined (for the skip check only)."""
    commands, current = [], ""
    for text in body:
        current += text
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        commands.append(current)
        current = ""
    if current:
        commands.append(current)
    return commands


def doc_files():
    return [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))


def environment(scratch):
    env = dict(os.environ)
    for name in ("HIPPO_DB", "HIPPO_MASTER", "HIPPO_MASTER_KEY", "HIPPO_KEY"):
        env.pop(name, None)
    bin_dir = os.environ.get("HIPPO_DOC_BIN")
    if bin_dir:
        env["PATH"] = str(Path(bin_dir).resolve()) + os.pathsep + env.get("PATH", "")
    python_path = os.environ.get("HIPPO_DOC_PYTHONPATH")
    if python_path:
        env["PYTHONPATH"] = str(Path(python_path).resolve())
    env["HIPPO_HOME"] = str(scratch / ".hippo")  # a master's local key: not the user's own
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def make_scratch(directory):
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "examples", directory / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return directory


def run_block(block, scratch, env):
    """Runs one block in `scratch`; DocError with its place, its commands and its output when it
    fails. The block runs in a process group of its own, killed when bash ends: nothing it started
    outlives it (its output goes to a file, which a process left behind cannot hold open)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", block.script],
                                   cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            process.wait(timeout=BLOCK_TIMEOUT_S)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            kill_group(process)
            process.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
    if timed_out:
        raise DocError(f"{block.where}: the block ran past {BLOCK_TIMEOUT_S} s\n"
                       f"--- block ---\n{block.script}--- output ---\n{output}")
    if process.returncode != 0:
        raise DocError(f"{block.where}: the block failed with exit status {process.returncode}\n"
                       f"--- block ---\n{block.script}--- output ---\n{output}")
    return output


def kill_group(process):
    """Kills what is left of the process group that `process` leads (its own id)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_file(path, scratch):
    """Runs the blocks of one file in order in `scratch` (made, with examples/). Returns the
    skipped blocks; raises DocError at the first failure."""
    make_scratch(scratch)
    env = environment(scratch)
    skipped = []
    for block in extract_blocks(path):
        if block.skip:
            skipped.append(block)
            continue
        run_block(block, scratch, env)
    return skipped


# --- skipped blocks are still checked: their hippo subcommands and options exist ---------------

def hippo_invocations(command):
    """(subcommand, options) of each `hippo ...` in a command line."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return []
    out = []
    for i, word in enumerate(words):
        if word != "hippo" or (i > 0 and words[i - 1] not in ("|", "&&", "||", ";", "then",
                                                              "do", "time", "exec")):
            continue
        rest, sub = words[i + 1:], None
        options = []
        j = 0
        while j < len(rest):
            w = rest[j]
            if w in ("|", "&&", "||", ";", "&") or w.startswith(">"):
                break
            if w.startswith("--"):
                options.append(w.split("=", 1)[0])
            elif sub is None and not w.startswith("-") and re.fullmatch(r"[a-z][a-z-]*", w):
                if not (j > 0 and rest[j - 1].startswith("--") and "=" not in rest[j - 1]):
                    sub = w
            j += 1
        if sub:
            out.append((sub, options))
    return out


def help_text(env, *words):
    return subprocess.run(["hippo", *words, "--help"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=30).stdout.decode(errors="replace")


def subcommands(env):
    """The subcommand names that `hippo --help` lists."""
    text = help_text(env)
    listed = text.split("Subcommands:", 1)[1] if "Subcommands:" in text else ""
    return {line.split()[0] for line in listed.splitlines() if line.startswith("  ")}


def check_skipped(block, env):
    known = subcommands(env) | {"worker"}  # `hippo worker` is hippo-worker, beside hippo
    global_help = help_text(env)
    for command in block.commands:
        for sub, options in hippo_invocations(command):
            if sub not in known:
                raise DocError(f"{block.where}: `hippo {sub}` is not a subcommand (hippo --help "
                               f"lists {', '.join(sorted(known))})")
            text = help_text(env, sub) + global_help
            for option in options:
                if not re.search(re.escape(option) + r"\b", text):
                    raise DocError(f"{block.where}: `hippo {sub}` has no option {option}")


# --- the tests -----------------------------------------------------------------------------------

def doc_ids():
    return [str(p.relative_to(REPO)) for p in doc_files()]


@pytest.mark.parametrize("doc", doc_ids())
def test_blocks_run_as_written(doc, tmp_path):
    try:
        run_file(REPO / doc, tmp_path / "scratch")
    except DocError as e:
        pytest.fail(str(e), pytrace=False)


def skipped_blocks():
    out = []
    for path in doc_files():
        for block in extract_blocks(path):
            if block.skip:
                out.append(pytest.param(block, id=block.where))
    return out


@pytest.mark.parametrize("block", skipped_blocks())
def test_skipped_block(block, tmp_path):
    try:
        check_skipped(block, environment(tmp_path))
    except DocError as e:
        pytest.fail(str(e), pytrace=False)
    pytest.skip(f"{block.where}: {block.skip}")


# --- the runner itself ---------------------------------------------------------------------------

def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_a_block_that_drifted_from_the_program_fails_with_its_place(tmp_path):
    doc = write(tmp_path / "drift.md", "# A page\n\nSome text.\n\n```sh\nhippo --help >/dev/null\n"
                "hippo no-such-subcommand examples/fmnist-mlp-ci.json\n```\n")
    with pytest.raises(DocError) as e:
        run_file(doc, tmp_path / "scratch")
    message = str(e.value)
    assert "drift.md:5: the block failed with exit status 2" in message  # where, and how
    assert "hippo no-such-subcommand examples/fmnist-mlp-ci.json" in message  # the command
    assert "error:" in message.split("--- output ---")[1]  # hippo's own complaint


def test_blocks_share_files_not_variables_and_run_from_the_scratch_directory(tmp_path):
    doc = write(tmp_path / "order.md", "```bash\necho made > made.txt\nX=1\n```\n\n"
                "```console\n$ test -f made.txt && test -z \"$X\"\nsome output, not run\n"
                "$ test -f examples/fmnist-mlp-ci.json\n```\n")
    assert run_file(doc, tmp_path / "scratch") == []
    assert (tmp_path / "scratch" / "made.txt").read_text() == "made\n"


def test_a_block_leaves_no_process_behind(tmp_path):
    doc = write(tmp_path / "background.md", "```sh\nsleep 300 &\necho $! > pid\n```\n")
    run_file(doc, tmp_path / "scratch")
    pid = int((tmp_path / "scratch" / "pid").read_text())
    for _ in range(100):  # killed: gone once its parent, bash, is gone too (reaped by init)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the block's background process {pid} is still running")


def test_a_failing_command_in_the_middle_of_a_block_fails_it(tmp_path):
    doc = write(tmp_path / "middle.md", "```sh\nfalse\necho never\n```\n")
    with pytest.raises(DocError, match="middle.md:1: the block failed with exit status 1"):
        run_file(doc, tmp_path / "scratch")
    doc = write(tmp_path / "pipe.md", "```sh\nfalse | cat\n```\n")
    with pytest.raises(DocError, match="pipe.md:1"):
        run_file(doc, tmp_path / "scratch2")


def test_a_block_in_a_list_item_runs_too(tmp_path):
    doc = write(tmp_path / "list.md", "- an item:\n\n  ```sh\n  echo made > made.txt\n"
                "  cat <<'EOF' > here.txt\n  text\n  EOF\n  ```\n")
    [block] = extract_blocks(doc)
    assert block.line == 3 and block.script == "echo made > made.txt\ncat <<'EOF' > here.txt\ntext\nEOF\n"
    run_file(doc, tmp_path / "scratch")
    assert (tmp_path / "scratch" / "here.txt").read_text() == "text\n"


def test_other_languages_are_not_run_and_skips_need_a_reason(tmp_path):
    doc = write(tmp_path / "other.md", "```json\n{\"not\": \"run\"}\n```\n```\nfalse\n```\n"
                "```text\nfalse\n```\n<!-- docs-test: skip runs until stopped -->\n```sh\n"
                "false\n```\n")
    [skipped] = run_file(doc, tmp_path / "scratch")
    assert (skipped.line, skipped.skip) == (11, "runs until stopped")
    write(doc, "<!-- docs-test: skip -->\n```sh\nfalse\n```\n")
    with pytest.raises(DocError, match="must give a reason"):
        extract_blocks(doc)
    write(doc, "<!-- docs-test: skip why -->\n\nA paragraph.\n```sh\nfalse\n```\n")
    with pytest.raises(DocError, match="before a command block"):
        extract_blocks(doc)
    write(doc, "```sh\nfalse\n")
    with pytest.raises(DocError, match="never closed"):
        extract_blocks(doc)


def test_a_skipped_block_still_names_real_subcommands_and_options(tmp_path):
    env = environment(tmp_path)
    doc = write(tmp_path / "skip.md", "<!-- docs-test: skip a worker runs until stopped -->\n"
                "```sh\nhippo --db plan.db master --bind tcp://127.0.0.1:5555   # a comment\n"
                "hippo worker --master tcp://127.0.0.1:5555 --threads 1\n```\n")
    [block] = extract_blocks(doc)
    check_skipped(block, env)
    write(doc, "<!-- docs-test: skip why -->\n```sh\nhippo mastr --bind x\n```\n")
    with pytest.raises(DocError, match="`hippo mastr` is not a subcommand"):
        check_skipped(extract_blocks(doc)[0], env)
    write(doc, "<!-- docs-test: skip why -->\n```sh\nhippo master --bnd x\n```\n")
    with pytest.raises(DocError, match="has no option --bnd"):
        check_skipped(extract_blocks(doc)[0], env)


def test_every_page_can_be_read():
    for path in doc_files():
        extract_blocks(path)
    assert (REPO / "docs" / "spec.md").exists()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-rs", "-q"]))


# --- The names a folder's README gives of its code ---------------------------------------------
# master/README.md maps the master's files and names the functions that do each part
# (`Master::apply`, `check_snapshot_bytes`, ...). A name written there with `()` or `Class::` that
# no source file of the folder defines any more is a README that drifted from the code.

CODE_NAME = re.compile(r"`((?:[A-Za-z_]\w*::)*[A-Za-z_]\w*)(\(\))?`")


def names_in_readme(readme):
    """The backticked names of a README that are written as code: `f()` or `A::b`."""
    names = set()
    for match in CODE_NAME.finditer(readme.read_text()):
        name, call = match.group(1), match.group(2)
        if call or "::" in name:
            names.add(name)
    return names


CODE_FOLDERS = ["master", "worker", "stagetree", "storage", "searchers", "protocol", "kernels",
                "pipeline", "dashboard"]


def undefined_names(folder, code=None):
    """The names `folder`'s README writes as code that no source file defines: those of its own
    folder, or of the folders `code` lists (a README may name another part's function)."""
    roots = [folder] + [REPO / c for c in (code or [])]
    sources = "\n".join(p.read_text() for root in roots for p in sorted(root.rglob("*"))
                        if p.suffix in {".h", ".cc", ".cu"})
    missing = []
    for name in sorted(names_in_readme(folder / "README.md")):
        last = name.split("::")[-1]
        if not re.search(r"\b" + re.escape(last) + r"\b", sources):
            missing.append(name)
    return missing


@pytest.mark.parametrize("folder", ["master"])
def test_a_readme_names_only_functions_its_folder_has(folder):
    assert undefined_names(REPO / folder, CODE_FOLDERS) == []


def test_a_readme_naming_a_function_that_is_gone_fails(tmp_path):
    (tmp_path / "README.md").write_text("`kept()` and `Gone::vanished` and `plain`\n")
    (tmp_path / "a.cc").write_text("void kept() {}\n")
    assert undefined_names(tmp_path) == ["Gone::vanished"]


# --- a claim that a feature is not implemented, against what `hippo preview` accepts -----------

NOT_IMPLEMENTED = re.compile(r"\bnot\s+(?:yet\s+)?(?:implemented|supported)\b", re.IGNORECASE)


def feature_probes():
    """A spec per feature a doc may name, each one `hippo preview` must accept: every searcher
    that an example uses (by its name), `nsga2`, several objectives and constraints, a searched
    model field, and a pipelined model. Keyed by the words a doc writes in backticks."""
    probes = {}
    for path in sorted((REPO / "examples").glob("*.json")):
        spec = json.loads(path.read_text())
        probes.setdefault(spec["searcher"]["name"], spec)
    moasha = probes["moasha"]  # objectives, constraints, and "hidden" as a grid
    assert isinstance(moasha["model"]["hidden"], dict) and "constraints" in moasha["searcher"]
    for word in ("objectives", "constraints", "hidden"):
        probes[word] = moasha
    probes["pipeline"] = json.loads((REPO / "examples" / "gpt-fortunes-pipeline.json").read_text())
    nsga2 = json.loads((REPO / "examples" / "fmnist-mlp-ci.json").read_text())
    nsga2["searcher"] = {"name": "nsga2", "max_trials": 4,
                         "objectives": [{"metric": "accuracy", "mode": "max"},
                                        {"metric": "params", "mode": "min"}]}
    probes["nsga2"] = nsga2
    return probes


def preview_accepts(spec, env, scratch):
    path = scratch / f"probe-{spec['name']}.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run(["hippo", "preview", str(path)], env=env, cwd=scratch,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    return done.returncode == 0, done.stderr.decode(errors="replace")


def not_implemented_claims(path):
    """(line, feature word) for each backticked word of a paragraph that says "not implemented"
    (or "not supported") and that feature_probes knows."""
    probes = feature_probes()
    claims, line = [], 1
    for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
        if NOT_IMPLEMENTED.search(paragraph):
            for code in re.findall(r"`([^`]+)`", paragraph):
                for word in re.findall(r"[A-Za-z_][A-Za-z_0-9]*", code):
                    if word in probes:
                        claims.append((line, word))
        line += paragraph.count("\n") + 2
    return claims


def check_claims(path, env, scratch):
    probes = feature_probes()
    for line, word in not_implemented_claims(path):
        accepted, _ = preview_accepts(probes[word], env, scratch)
        if accepted:
            raise DocError(f"{path}:{line}: says `{word}` is not implemented, but hippo preview "
                           "accepts a spec with it")


@pytest.mark.parametrize("doc", doc_ids())
def test_no_doc_says_not_implemented_of_what_the_program_accepts(doc, tmp_path):
    try:
        check_claims(REPO / doc, environment(tmp_path), tmp_path)
    except DocError as e:
        pytest.fail(str(e), pytrace=False)


def test_every_feature_probe_is_accepted_and_a_false_claim_fails(tmp_path):
    env = environment(tmp_path)
    for word, spec in feature_probes().items():
        accepted, error = preview_accepts(spec, env, tmp_path)
        assert accepted, f"the probe for `{word}` is refused: {error}"
    doc = write(tmp_path / "claim.md", "# A page\n\nText.\n\nSeveral objectives (`objectives`, "
                "the searcher `moasha`)\nare not implemented: such a spec is refused.\n")
    assert not_implemented_claims(doc) == [(5, "objectives"), (5, "moasha")]
    with pytest.raises(DocError, match=r"claim.md:5: says `objectives` is not implemented"):
        check_claims(doc, env, tmp_path)
