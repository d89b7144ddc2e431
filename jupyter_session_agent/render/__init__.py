"""Rendering: sessions' parts and messages as text, for people and for models.

Pure functions over the values of ``core/`` (no I/O, no IPython): one module per form, each
with one rendering per part class and a readable fallback for a class it does not know
(:mod:`.forms`), sharing the words of :mod:`.words` so a part reads the same everywhere:

* :mod:`.markdown`: the live view's ``text/markdown`` (``ui/display.py``) and the Markdown
  export (``exchange/transfer.py``);
* :mod:`.html`: the self-contained HTML export;
* :mod:`.plain`: the short ``text/plain`` form;
* :mod:`.for_model`: a history as text for a model (the summary input, the memory
  extractor's input), one walk with a style per use;
* :mod:`.escape`: untrusted text made safe for the HTML and the Markdown of every form and
  table the product shows.

It sits above ``tools/`` (sizes are shown with ``tools.kernel.human``) and below every layer
that shows or sends a history (``loop/``, ``exchange/``, ``memory/``, ``ui/``).
"""
