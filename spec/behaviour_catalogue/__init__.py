"""The behaviour catalogue's data, one module per range of behaviour ids (B1-B14,
B15-B27, B28-B36, B37-B44), with what one entry holds (`entry.py`) and the headings of
docs/session-semantics.md they cite (`sections.py`). `spec.behaviours` is the one import
surface: it joins the ranges into `BEHAVIOURS` and answers questions about them."""
