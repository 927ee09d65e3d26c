"""Application data (icon, PNG sizes), installed as the package `inspector.resources`.

pyproject.toml maps this top-level folder to that package name, so the files are found through
`importlib.resources` from a checkout, an editable install, a wheel and a PyInstaller build alike.
"""
