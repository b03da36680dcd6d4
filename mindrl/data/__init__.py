"""Prompt datasets (task generators, templates, preprocessing, prompt loading), the step's
Batch, and its rows: how the Batch becomes model inputs (rows/)."""
