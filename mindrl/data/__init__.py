"""Prompt datasets: task generators, templates, preprocessing, prompt loading."""
