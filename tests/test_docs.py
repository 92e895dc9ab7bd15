"""The documentation: the site builds offline with no warning (``mkdocs build
--strict``), every public name has a reference page that documents every
parameter, the README's links land on docs pages, and the docstrings'
examples run as doctests. Nothing here starts an engine."""

from __future__ import annotations

import dataclasses
import doctest
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import llm_label_clf

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
#: Public modules whose docstrings carry examples (engine-bound lines are
#: ``+SKIP``), and the package each one's examples need.
DOCTEST_MODULES = {
    "llm_label_clf.classifier": None,
    "llm_label_clf.selection.search": None,
    "llm_label_clf.exceptions": None,
    "llm_label_clf.label_reads": None,
    "llm_label_clf.engines.local": None,
    "llm_label_clf.engines.remote": None,
    "llm_label_clf.fitting.calibration": None,
    "llm_label_clf.store.handle": None,
    "llm_label_clf.distributed.ray_data": "ray",
    "llm_label_clf.distributed.dask_frames": "dask.dataframe",
    "llm_label_clf.distributed.ray_llm": "ray",
}
#: Markdown pages holding ``>>>`` examples.
DOCTEST_PAGES = sorted(p for p in DOCS.rglob("*.md") if ">>> " in p.read_text(encoding="utf-8"))


def _nav_pages(nav) -> list[str]:
    pages = []
    for item in nav:
        target = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(target) if isinstance(target, list) else [target]
    return pages


class _Loader(yaml.SafeLoader):
    """mkdocs.yml may hold ``!!python/name`` tags (Material's emoji options); none are needed here."""


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
NAV = _nav_pages(yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_Loader)["nav"])


def test_strict_build_has_no_warning(tmp_path):
    """``make docs``: offline, warnings are errors, and none is printed (built into tmp_path)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "WARNING" not in log and "ERROR" not in log, log
    for name in llm_label_clf.__all__:  # the API pages were generated, with their docstrings
        page = (tmp_path / "site" / "reference" / name / "index.html").read_text(encoding="utf-8")
        assert name in page
    estimator = (tmp_path / "site" / "reference" / "LLMLabelClassifier" / "index.html").read_text(encoding="utf-8")
    for text in ("base_url", "multioutput_read", "verbalizers_", "get_feature_names_out", "diagnose"):
        assert text in estimator, text


def test_build_fetches_nothing():
    """The site builds offline: no Google Fonts, no social cards, nothing the build would download."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^\s+font: false", config, re.MULTILINE)
    assert "social" not in config
    assert "execute: false" in config  # notebooks are shown with their saved outputs, never run


@pytest.mark.parametrize("name", llm_label_clf.__all__)
def test_every_public_name_has_a_reference_page(name):
    page = DOCS / "reference" / f"{name}.md"
    assert page.is_file(), f"no reference page for {name}"
    text = page.read_text(encoding="utf-8")
    obj = getattr(llm_label_clf, name)
    if obj.__module__.startswith("llm_label_clf"):
        assert f"::: llm_label_clf.{name}" in text  # generated from the docstring
    else:
        assert name in text  # a re-export (NotFittedError): described by hand
    assert f"reference/{name}.md" in NAV, f"{name}'s page is not in mkdocs.yml's nav"
    assert f"({name}.md)" in (DOCS / "reference" / "index.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [n for n in llm_label_clf.__all__ if callable(getattr(llm_label_clf, n))])
def test_docstrings_document_every_parameter(name):
    """numpydoc: each constructor or function parameter has an entry in Parameters."""
    obj = getattr(llm_label_clf, name)
    if not obj.__module__.startswith("llm_label_clf") or (inspect.isclass(obj) and issubclass(obj, Exception)):
        pytest.skip("an exception or a re-export: no parameters of its own to document")
    function = obj.__init__ if inspect.isclass(obj) else obj
    doc = inspect.getdoc(obj) or ""
    # a dataclass documents its fields (its constructor's parameters) under Attributes
    section = "Attributes\n----------" if dataclasses.is_dataclass(obj) else "Parameters\n----------"
    assert section in doc or not _parameters(function), f"{name} has no {section.splitlines()[0]} section"
    documented = set()
    for line in doc.splitlines():
        match = re.match(r"^([\w, *]+?)\s*(?::|$)", line)
        if match and not line.startswith(" "):
            documented |= {n.strip().lstrip("*") for n in match.group(1).split(",")}
    missing = [p for p in _parameters(function) if p not in documented]
    assert not missing, f"{name}: parameters without a Parameters entry: {missing}"


def _parameters(function) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p not in ("self", "args", "kwargs")]


def test_estimator_docstrings_list_fitted_attributes():
    doc = inspect.getdoc(llm_label_clf.LLMLabelClassifier)
    attributes = doc.split("Attributes\n----------", 1)[1]
    for name in ("classes_", "verbalizers_", "label_token_ids_", "label_sequences_", "label_mode_", "options_",
                 "prompt_", "chat_", "few_shot_rows_", "few_shot_prefix_", "class_prior_", "calibration_bias_",
                 "calibrator_", "plans_", "estimators_", "n_outputs_", "output_kind_"):
        assert re.search(rf"^{name}\b", attributes, re.MULTILINE), name
    doc_cv = inspect.getdoc(llm_label_clf.LLMLabelClassifierCV)
    for name in ("cv_results_", "best_params_", "best_estimator_", "fit_cost_"):
        assert name in doc_cv.split("Attributes\n----------", 1)[1], name


def test_readme_links_resolve_to_docs_pages():
    """Each relative link of the README lands on a file; those into docs/ on a page of the nav, and an
    anchor on a heading of that page."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    into_docs = [link for link in relative if link.startswith("docs/")]
    assert len(into_docs) >= 10, f"{README.name} links into docs/ only {len(into_docs)} times"
    assert len(text.splitlines()) <= 200, f"{README.name} has grown past 200 lines: move detail into docs/"
    for link in relative:
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"{README.name}: {link} does not exist"
        if path.startswith("docs/") and path.endswith(".md"):
            page = path.removeprefix("docs/")
            assert page in NAV, f"{README.name}: {link} is not a page in mkdocs.yml's nav"
            if anchor:
                assert anchor in _anchors(target), f"{README.name}: {link}: no heading with that anchor"


def _anchors(page: Path) -> set[str]:
    from markdown.extensions.toc import slugify

    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.MULTILINE)
    return {slugify(re.sub(r"[`*]", "", h), "-") for h in headings}


def test_estimator_renders_as_html_for_notebooks():
    """scikit-learn's HTML display (inherited from BaseEstimator) works for the estimator and a pipeline."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    clf = llm_label_clf.LLMLabelClassifier(prompt="Review: {text}\nSentiment:", few_shot=4)
    html = clf._repr_html_()
    assert "LLMLabelClassifier" in html and "few_shot" in html and "<style>" in html
    assert "LLMLabelClassifier" in make_pipeline(clf, LogisticRegression())._repr_html_()


def test_set_output_is_offered_for_transform():
    """``set_output(transform="pandas")`` is there and leaves the estimator a classifier (no transformer tags)."""
    from sklearn.base import clone, is_classifier

    clf = llm_label_clf.LLMLabelClassifier()
    assert clf.set_output(transform="pandas") is clf
    assert is_classifier(clf) and clf.__sklearn_tags__().transformer_tags is None
    assert not hasattr(clf, "fit_transform")
    assert clone(clf)._sklearn_output_config == {"transform": "pandas"}


@pytest.mark.parametrize("module", DOCTEST_MODULES)
def test_docstring_examples(module):
    if DOCTEST_MODULES[module]:
        pytest.importorskip(DOCTEST_MODULES[module], reason=f"{module}'s examples need {DOCTEST_MODULES[module]}")
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(mod, module, globs={}):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} doctest example(s) failed in {module} (printed above)"


@pytest.mark.parametrize("page", DOCTEST_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_docs_page_examples(page):
    results = doctest.testfile(
        str(page), module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    assert results.failed == 0
