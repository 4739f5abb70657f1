"""The report's rendering: an :class:`gcbench.report.analysis.Analysis` turned into HTML and
Markdown (:mod:`.context`, :mod:`.writer`, templates), tables (:mod:`.tables`), PNG plots
(:mod:`.plots`), the paper tables (:mod:`.paper`) and CSV files (:mod:`.exports`).
Rendering never computes a statistic: it formats what the analysis computed."""
