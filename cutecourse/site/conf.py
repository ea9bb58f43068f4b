"""Sphinx configuration of the course site (``python -m cutecourse.site``; ``./course.sh site``).

The source tree is staged by ``cutecourse.site.stage`` (copies of the pages, widgets as pictures);
this file only says how to render it: myst-nb reads notebooks with their stored outputs and never
runs them, and nothing on a page is fetched from another server except MathJax, on the one page
with a formula.
"""

from pathlib import Path

project = "cutecourse"
author = "the cutecourse authors"
html_title = "cutecourse: the CuTe DSL course"

extensions = ["myst_nb", "sphinx.ext.githubpages"]  # githubpages: a .nojekyll file, so Pages serves _static/
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3  # "page.md#a-section" links resolve to headings

# Notebooks: stored outputs only. A site build that ran them would take as long as the tests.
nb_execution_mode = "off"
# The staged notebooks carry no widget state and no widget views (cutecourse.site.widgets); these
# keep the theme from loading the ipywidgets manager from a CDN and a stray view from rendering.
nb_ipywidgets_js = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]
nb_merge_streams = True

# Notebook headings go from "#" to "###" in places (the exercises): harmless on the page.
suppress_warnings = ["myst.header"]
exclude_patterns = ["**/.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_theme_options = {
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
    "use_download_button": True,
    "show_toc_level": 2,
}
html_static_path = [str(Path(__file__).parent / "static")]
html_css_files = ["course.css"]
html_copy_source = True  # the download button: the page's notebook or markdown (the staged copy)
html_sourcelink_suffix = ""  # ".ipynb", not ".ipynb.txt"
html_show_sourcelink = False
html_last_updated_fmt = None
