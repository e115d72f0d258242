"""Rule language, rule packs, evaluator and alert lifecycle, notifiers (the rules issue builds them).

Like ingest/, this package imports nothing from FastAPI or Dash.
"""
