"""Sphinx configuration of the documentation site (built by ./dev/docs; checked by
tests/test_docs.py). Pages are Markdown (MyST); the Python API reference is autodoc over the
package's docstrings; the Scala API reference is Scaladoc (sbt core/doc), copied in as is."""

import os
from pathlib import Path

import keyed_watermarks

docs = Path(__file__).resolve().parent
root = docs.parent

project = "keyed-watermarks"
author = "the keyed-watermarks authors"
copyright = "the keyed-watermarks authors"
release = version = keyed_watermarks.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx_copybutton"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
# `#heading` links in the Markdown resolve as on GitHub, and a broken one is a warning (an
# error under -W).
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]
suppress_warnings = []

# Unresolvable references are warnings too (-n); types from pyspark and typing have no pages here.
nitpicky = True
nitpick_ignore_regex = [
    ("py:class", r"(pyspark|typing|datetime|collections)\..*"),
    ("py:class", r"(DataFrame|Column|SparkSession|Duration|BatchWriter|Any|Optional|Union|Sequence|Mapping|Dict|List|Tuple|Callable)"),
    ("py:class", r"(str|int|float|bool|None)"),
]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

html_theme = "furo"
html_title = f"keyed-watermarks {release}"
html_static_path = []
# The project's repository: furo links every page to its source ("view" and "edit this page").
repository = "https://github.com/keyedwatermarks/keyed-watermarks"
html_theme_options = {
    "source_repository": repository + "/",
    "source_branch": "main",
    "source_directory": "docs/",
}
# Copy buttons leave out prompts (">>> ", "... ", "$ ") and the doctests' output lines.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True
# Files copied into the site as they are: scaladoc/ (sbt core/doc), put there by ./dev/docs.
# The link to it in api/scala.md is checked like any other (tests/test_docs.py).
extra = Path(os.environ.get("KW_DOCS_EXTRA", root / "build" / "docs" / "extra")).resolve()
html_extra_path = [str(extra)] if extra.is_dir() else []



def _hide_internal_constructors(app, what, name, obj, options, signature, return_annotation):
    """KeyedWatermark and KeyedWindow are made by keyed_watermark(...) and .window(...), not by
    their constructors: their class headers show no constructor signature."""
    if what == "class" and name in ("keyed_watermarks.KeyedWatermark", "keyed_watermarks.KeyedWindow"):
        return "", None
    return None


# The benchmark result pages, copied from benchmarks/results/ by ./dev/docs, are a lab notebook:
# reachable from the benchmarks index (benchmarks/README.md, a page of the site), not in the
# navigation or the search, where they would swamp the user's pages.
RESULT_PAGES = "_generated/benchmarks/results/"


def _benchmark_results_off_the_menu(app, docname, source):
    if docname.startswith(RESULT_PAGES):
        source[0] = "---\norphan: true\nnosearch: true\n---\n" + source[0]


def setup(app):
    app.connect("autodoc-process-signature", _hide_internal_constructors)
    app.connect("source-read", _benchmark_results_off_the_menu)
