"""report.html, in three parts: ``analysis`` (timeline and lease facts drawn from the history),
``figures`` (the matplotlib SVGs) and ``page`` (the HTML assembly)."""

from chaos.report.html.analysis import build_timeline
from chaos.report.html.figures import figure_svg
from chaos.report.html.page import external_urls, load_table, render_html, write_html

__all__ = ["build_timeline", "external_urls", "figure_svg", "load_table", "render_html",
           "write_html"]
