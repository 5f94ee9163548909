"""The documentation: the site builds with warnings as errors (./dev/docs), every link in it
resolves, the package's docstring examples and the Markdown blocks marked runnable run against
a real SparkSession, the layout map of CONTRIBUTING.md names real paths, and the built pages
render in headless Chromium (title, navigation, code blocks)."""

from __future__ import annotations

import doctest
import importlib
import json
import os
import re
import shutil
import subprocess
import traceback
import types
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List, Set, Tuple
from urllib.parse import unquote, urlsplit

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "build" / "docs" / "html"
# A line of its own right before a ```python fence marks the block as runnable.
RUN_MARK = "<!-- test: run -->"
# Markdown files whose marked blocks run: each file's blocks in order, in one namespace.
MARKDOWN = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOCTEST_MODULES = [
    "keyed_watermarks",
    "keyed_watermarks.keyed",
    "keyed_watermarks._jvm",
    "keyed_watermarks.metrics",
    "keyed_watermarks.testing",
    "keyed_watermarks.report",
    "keyed_watermarks.rollup",
    "keyed_watermarks.join",
    "keyed_watermarks.state",
]


@pytest.fixture(scope="module")
def site() -> Path:
    """Builds the site once (Scaladoc only if no earlier build left it; sbt is slow to start)."""
    done = subprocess.run(
        ["./dev/docs", "--no-scaladoc"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"dev/docs failed:\n{done.stdout[-5000:]}\n{done.stderr[-10000:]}"
    return SITE


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: List[str] = []
        self.ids: Set[str] = set()

    def handle_starttag(self, tag: str, attrs) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        for attr in ("href", "src"):
            if a.get(attr) and not (tag == "link" and a.get("rel") in ("preconnect", "dns-prefetch")):
                self.links.append(a[attr])


def _parse(path: Path) -> _Links:
    p = _Links()
    p.feed(path.read_text(encoding="utf-8", errors="replace"))
    return p


@pytest.mark.slow  # builds the site (Sphinx, maybe sbt) or runs Chromium: see pytest.ini
def test_site_links_resolve(site: Path) -> None:
    """Every relative link of every page (not inside the copied Scaladoc) names a file of the
    site, and a #fragment an element of that page."""
    pages = [p for p in site.rglob("*.html") if "scaladoc" not in p.relative_to(site).parts]
    parsed: Dict[Path, _Links] = {}
    broken: List[Tuple[str, str]] = []
    checked = 0
    for page in pages:
        for link in parsed.setdefault(page.resolve(), _parse(page)).links:
            url = urlsplit(link)
            if url.scheme or link.startswith(("//", "mailto:", "javascript:")):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            checked += 1
            if not target.is_file():
                broken.append((str(page.relative_to(site)), link))
                continue
            if url.fragment and target.suffix == ".html":
                if target not in parsed:
                    parsed[target] = _parse(target)
                ids = parsed[target].ids
                if unquote(url.fragment) not in ids:
                    broken.append((str(page.relative_to(site)), link))
    assert not broken, f"{len(broken)} broken links: {broken[:20]}"
    assert len(pages) >= 12 and checked > 500, (len(pages), checked)
    # The Scala API page links into the Scaladoc copied by dev/docs: the real one when sbt
    # core/doc ran (dev/test runs it before), else the page saying how to build it.
    assert "scaladoc/index.html" in (site / "api" / "scala.html").read_text()
    scaladoc = (site / "scaladoc" / "index.html").read_text()
    built = (ROOT / "jvm/target/spark-4.3/scala-2.13/api/index.html").is_file()
    assert ("Scaladoc not built" in scaladoc) != built, "dev/docs copied the wrong Scaladoc page"
    # The benchmark result pages are reachable, but neither in the navigation nor the search.
    results = sorted((site / "_generated/benchmarks/results").glob("*.html"))
    assert results
    nav = (site / "index.html").read_text()
    assert "/results/" not in nav.split('class="sidebar-tree"', 1)[1].split("</nav>", 1)[0]
    index = (site / "searchindex.js").read_text()
    index = json.loads(index[index.index("(") + 1 : index.rindex(")")])
    found = {
        index["docnames"][i]
        for docs in index["terms"].values()
        for i in (docs if isinstance(docs, list) else [docs])
    }
    assert "semantics" in found
    assert not [d for d in found if "/results/" in d], sorted(found)


@pytest.mark.slow  # builds the site (Sphinx, maybe sbt) or runs Chromium: see pytest.ini
def test_api_page_has_every_public_name(site: Path) -> None:
    """The Python API page documents every name of kw.__all__ (autodoc leaves out a member
    without a docstring, so this fails when one loses it)."""
    html = (site / "api" / "python.html").read_text()
    missing = [n for n in kw.__all__ if f'id="keyed_watermarks.{n}"' not in html]
    assert not missing, f"not on the Python API page: {missing}"


def _github_slug(heading: str) -> str:
    """The anchor GitHub (and the site, myst_heading_anchors) gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_repository_markdown_links_resolve() -> None:
    """README.md and CONTRIBUTING.md, read on the repository's front page: every relative link
    names an existing file, and a #fragment into a Markdown file one of its headings."""
    broken = []
    for doc in (ROOT / "README.md", ROOT / "CONTRIBUTING.md"):
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for link in re.findall(r"\]\(([^)\s]+)\)", text):
            url = urlsplit(link)
            if url.scheme:
                continue
            target = (doc.parent / url.path) if url.path else doc
            if not target.exists():
                broken.append((doc.name, link))
            elif url.fragment and target.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", target.read_text(), flags=re.M)
                if url.fragment not in {_github_slug(h) for h in headings}:
                    broken.append((doc.name, link))
    assert not broken, broken


def _paragraph_starts(text: str) -> List[Tuple[int, str]]:
    """The first line of every prose paragraph of a Markdown text (outside code fences), with
    its line number."""
    starts = []
    fence = None
    previous = ""
    for n, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        opener = re.match(r"^(`{3,}|~{3,}|:{3,})", stripped)
        if fence:
            if stripped.startswith(fence):
                fence = None
        elif opener:
            fence = opener.group(1)
        elif stripped and not previous:
            starts.append((n, stripped))
        previous = "" if fence else stripped
    return starts


def test_no_paragraph_starts_with_punctuation() -> None:
    """No paragraph of the Markdown pages starts with a comma, semicolon, closing bracket or
    full stop: the sign of a sentence whose start was lost in an edit."""
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line[:60]}"
        for path in [*MARKDOWN, ROOT / "benchmarks" / "README.md", ROOT / "CHANGELOG.md"]
        if path.is_file()
        for n, line in _paragraph_starts(path.read_text())
        if re.match(r"^[,;:.)\]}]", line)
    ]
    assert not bad, "paragraphs starting with punctuation:\n" + "\n".join(bad)
    # The check itself finds the case it is for.
    assert _paragraph_starts("text\n\n, lost start\n```\n, code\n```\n")[1] == (3, ", lost start")


def test_contributing_layout_names_real_paths() -> None:
    """The layout map of CONTRIBUTING.md: each path exists, and every package directory of the
    Scala sources is in it (a moved or new package must be added)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)
    assert len(paths) >= 15
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"
    package = "jvm/src/main/scala/io/github/keyedwatermarks"
    dirs = sorted(d.name for d in (ROOT / package).iterdir() if d.is_dir())
    unlisted = [d for d in dirs if f"{package}/{d}/" not in paths]
    assert not unlisted, f"package directories missing from CONTRIBUTING.md's layout: {unlisted}"


@pytest.fixture
def events(spark, tmp_path):
    """The streaming DataFrame the docstring examples use (docs/api/python.md says so)."""
    schema = "device STRING, ts TIMESTAMP, temp DOUBLE, kind STRING"
    (tmp_path / "events").mkdir()
    return spark.readStream.schema(schema).parquet(str(tmp_path / "events"))


def test_docstring_examples(spark, events) -> None:
    """The package's docstring examples, as doctests, with a real session and streaming input."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    finder = doctest.DocTestFinder()
    examples = 0
    for name in DOCTEST_MODULES:
        module = importlib.import_module(name)
        for test in finder.find(module, name, globs={"spark": spark, "kw": kw, "F": F, "events": events}):
            if test.examples:
                runner.run(test)
                examples += len(test.examples)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed (output above)"
    # Every public function has an example: a docstring losing its examples fails here.
    assert examples >= 40, examples
    for name in kw.__all__:  # a class counts its methods' examples
        assert any(t.examples for t in finder.find(getattr(kw, name), name)), f"kw.{name}: no example"


def runnable_blocks(path: Path) -> List[str]:
    """The ```python blocks right after a RUN_MARK line."""
    blocks = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == RUN_MARK:
            assert lines[i + 1].strip() == "```python", f"{path}:{i + 2}: {RUN_MARK} must precede ```python"
            end = lines.index("```", i + 2)
            blocks.append("\n".join(lines[i + 2 : end]))
    return blocks


def _failed_assert(error: AssertionError, name: str, code: str, namespace: dict) -> str:
    """What pytest cannot show for exec'd code: the failing line and the values of the names in
    it (a block's bare ``assert`` says nothing else)."""
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == name]
    if not frames or frames[-1].lineno is None:
        return str(error)
    last = frames[-1].end_lineno or frames[-1].lineno
    line = " ".join(x.strip() for x in code.splitlines()[frames[-1].lineno - 1 : last])
    names = dict.fromkeys(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", line))
    values = {k: namespace[k] for k in names if k in namespace and not callable(namespace[k])
              and not isinstance(namespace[k], types.ModuleType)}
    shown = "; ".join(f"{k} = {v!r}"[:2000] for k, v in values.items())
    return f"{name}:{frames[-1].lineno}: {line}\n{error}\n{shown}"


def test_marked_markdown_blocks_run(spark, tmp_path, monkeypatch) -> None:
    """Each Markdown file's runnable blocks, in order, in one namespace per file (as a reader
    pastes them), in a scratch directory."""
    monkeypatch.chdir(tmp_path)
    ran = {}
    seen: Set[Tuple[str, ...]] = set()
    for path in MARKDOWN:
        blocks = runnable_blocks(path)
        if not blocks or tuple(blocks) in seen:  # README repeats getting-started's first query
            continue
        seen.add(tuple(blocks))
        namespace: dict = {"__name__": "__docs__"}
        for n, code in enumerate(blocks):
            name = f"{path.relative_to(ROOT)}[block {n}]"
            try:
                exec(compile(code, name, "exec"), namespace)
            except AssertionError as e:
                raise AssertionError(_failed_assert(e, name, code, namespace)) from e
        ran[str(path.relative_to(ROOT))] = len(blocks)
    print("runnable blocks:", ran)
    assert "README.md" in ran, ran
    assert runnable_blocks(ROOT / "docs" / "getting-started.md"), "getting started lost its runnable block"


def _chromium() -> str:
    """Debian's chromium: installed with apt-get when missing (as root), else a skip saying why."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        pytest.skip("chromium is not installed and apt-get (as root) is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}"
    found = shutil.which("chromium")
    assert found, "apt-get installed chromium but it is not on PATH"
    return found


def _headless(chromium: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-extensions", *args],
        capture_output=True, text=True, timeout=180,
    )


@pytest.mark.slow  # builds the site (Sphinx, maybe sbt) or runs Chromium: see pytest.ini
@pytest.mark.parametrize(
    "page, title, code",
    [
        ("index.html", "keyed-watermarks", "kw.keyed_watermark"),
        ("api/python.html", "Python API", "kw.keyed_watermark"),
    ],
)
def test_pages_render_in_chromium(site: Path, page: str, title: str, code: str) -> None:
    """The page as a browser builds it (scripts run): its title, the navigation with every
    top-level page, and code blocks; a screenshot is left in build/docs/screenshots to look at."""
    chromium = _chromium()
    url = (site / page).as_uri()
    dom = _headless(chromium, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-3000:]
    html = dom.stdout
    assert re.search(rf"<title>{re.escape(title)}[^<]*</title>", html), html[:2000]
    nav = re.search(r'<div class="sidebar-tree">(.*?)</div>', html, re.S)
    assert nav, "no navigation (furo's sidebar-tree) in the rendered page"
    for entry in ("Getting started", "Guide", "Semantics", "Operations", "Deployment", "Python API", "Scala API"):
        assert entry in nav.group(1), f"navigation lacks {entry!r}"
    if page == "index.html":  # the demo's plot on the landing page
        assert re.search(r'<img[^>]+src="_images/iot_demo\.png"', html), "no demo plot on the landing page"
    blocks = re.findall(r'<div class="highlight"><pre[^>]*>(.*?)</pre>', html, re.S)
    assert blocks, "no code blocks rendered"
    assert 'class="copybtn' in html, "no copy buttons (sphinx-copybutton) on the code blocks"
    assert any(code in re.sub(r"<[^>]+>", "", b) for b in blocks), f"no code block with {code!r}"
    shots = ROOT / "build" / "docs" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    png = shots / (page.replace("/", "-").replace(".html", ".png"))
    png.unlink(missing_ok=True)
    shot = _headless(chromium, f"--screenshot={png}", "--window-size=1280,1600", url)
    assert shot.returncode == 0 and png.stat().st_size > 10_000, shot.stderr[-3000:]
