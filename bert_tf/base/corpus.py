"""The embedded default corpus: docstrings of the Python standard library.

Every machine that runs this package has the standard library's source, and its docstrings
are a few MB of real English prose, so the quickstart, the tests and the benchmarks need no
download. Sources are parsed with `ast` (never imported, so nothing runs). The output is in
the pretraining input format: one sentence per line, a blank line between documents (one
document per docstring).

    python -m bert_tf.base.corpus --output_file /tmp/stdlib.txt
"""

import ast
import os
import re
import sysconfig

from bert_tf.base.cli import ArgumentParser, run_main
from bert_tf.base.files import atomic_write

# Third-party packages live under the standard library's directory on some installs; they
# differ between machines, so they are left out of the default corpus.
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__"}

# A sentence ends at . ! or ? followed by whitespace and an upper-case letter, a quote or a
# bracket. Deliberately simple: docstrings are regular prose.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z])")


def stdlib_sources(root=None):
    """Sorted paths of the standard library's .py files (deterministic order)."""
    root = root or sysconfig.get_paths()["stdlib"]
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        paths.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return sorted(paths)


def docstrings(path):
    """All module, class and function docstrings of one source file."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), filename=path)
    except (SyntaxError, ValueError, OSError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    found = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=True)
        if doc:
            found.append(doc)
    return found


def split_sentences(text):
    """Prose paragraphs of a docstring -> sentences; code-like lines are dropped."""
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in paragraph.splitlines()]
        # Skip doctest blocks, tables and indented code: they are not sentences.
        if any(l.startswith((">>>", "...", "|", "+-", "$ ")) for l in lines):
            continue
        flat = " ".join(l for l in lines if l)
        if len(flat) < 20 or flat.count(" ") < 3:
            continue
        sentences.extend(s.strip() for s in _SENTENCE_END.split(flat) if s.strip())
    return sentences


def package_topics(packages, per_package, root=None):
    """Real sentences with real labels: the first sentence of each docstring of the
    standard library's `packages` (e.g. "asyncio", "email"), labelled with its package.
    Returns {package: [sentence, ...]}, each list `per_package` long, ordered by a hash
    of the sentence (the same on every machine with the same standard library), so that
    its first k sentences are a random sample; duplicates across packages left out.
    ValueError when a package has fewer docstrings."""
    import hashlib
    root = root or sysconfig.get_paths()["stdlib"]
    found, seen = {p: [] for p in packages}, set()
    for path in stdlib_sources(root):
        package = os.path.relpath(path, root).split(os.sep)[0]
        if package in found:
            for doc in docstrings(path):
                sentences = split_sentences(doc)
                if sentences and sentences[0] not in seen:
                    seen.add(sentences[0])
                    found[package].append(sentences[0])
    for package, sentences in found.items():
        if len(sentences) < per_package:
            raise ValueError(f"{package}: {len(sentences)} docstrings in {root}, "
                             f"{per_package} wanted")
        sentences.sort(key=lambda s: hashlib.sha256(s.encode("utf-8")).hexdigest())
        del sentences[per_package:]
    return found


def reference_topics():
    """The language reference pages that `help()` shows (pydoc_data), one per topic."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    return [topics[k] for k in sorted(topics)]


def iter_documents(roots=None, min_sentences=1):
    """Yields documents (lists of sentences): each docstring, then each reference topic.

    `roots`: source directories to read (default: the standard library, plus its
    reference topics).
    """
    def texts():
        # File by file, as they are read: a reader that stops after its first documents
        # parses only the files they come from, not the whole standard library.
        for root in roots or [None]:
            for path in stdlib_sources(root):
                yield from docstrings(path)
        if not roots:
            yield from reference_topics()
    for text in texts():
        sentences = split_sentences(text)
        if len(sentences) >= min_sentences:
            yield sentences


def write_corpus(output_file, roots=None, max_bytes=None):
    """Writes the corpus (temp name, then rename); returns (documents, bytes)."""
    n_docs = n_bytes = 0
    with atomic_write(output_file) as f:
        for sentences in iter_documents(roots):
            block = "\n".join(sentences) + "\n\n"
            f.write(block)
            n_docs += 1
            n_bytes += len(block.encode("utf-8"))
            if max_bytes and n_bytes >= max_bytes:
                break
    return n_docs, n_bytes


def run(args):
    n_docs, n_bytes = write_corpus(args.output_file, roots=args.source_dir,
                                   max_bytes=args.max_bytes)
    print(f"wrote {n_docs} documents, {n_bytes / 1e6:.2f} MB to {args.output_file}")
    return n_docs, n_bytes


def main(argv=None):
    parser = ArgumentParser(
        description="Write the Python standard library's docstrings as a pretraining corpus "
                    "(one sentence per line, blank line between documents).")
    parser.add_argument("--output_file", required=True, help="Text file to write.")
    parser.add_argument("--source_dir", action="append", default=None,
                        help="Read the docstrings of the .py files under this directory "
                             "instead of the standard library (repeatable).")
    parser.add_argument("--max_bytes", type=int, default=None,
                        help="Stop after about this many bytes (default: everything).")
    return run_main(run, parser.parse_args(argv), keras=False)


if __name__ == "__main__":
    main()
